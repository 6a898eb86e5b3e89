"""`packtool verify PACK --sources [DATA]` end to end (packtool.verify.sources.check_sources).

Damage that is consistent but wrong (every count and checksum re-signed) passes the integrity layer
and is caught by tokenizing the sources again. A real pack is built once with the CLI (`packtool
sample`, then `packtool pack --overflow split` with the built-in tokenizer: sources_pack);
the tests of each stage are in test_<stage>.py. Here: the untouched pack passes every
check in ORDER, --sample picks records deterministically, a failed stage leaves the later checks
"not run", and the CLI's usage errors.
"""

from __future__ import annotations

import numpy as np
import pytest
from sources_pack import cli, failed, manifest, prompt_token, verify  # noqa: E402

from packtool.verify import selftest as st
from packtool.verify.sources import check_sources
from packtool.verify.sources import load as vs


def test_untouched_pack_passes(built):
    code, checks = verify(built[1], "--sources")
    assert code == 0, [c["message"] for c in failed(checks).values()]
    for name in vs.ORDER:
        assert checks[name]["status"] == "pass", (name, checks[name]["message"])
    tok = checks[vs.TOKENS]
    m = manifest(built[1])
    assert m["counts"]["split"] >= 1  # the parts of split records were matched, too
    assert tok["evidence"]["documents"] == m["counts"]["documents"]
    assert tok["evidence"]["tokens_compared"] == m["tokens"]["out"]
    assert tok["message"].startswith(f"every one of the {m['counts']['tokenized']} packed records")


def test_check_sources_api_gives_every_check_in_order(built):
    """check_sources (what `api.check_sources` and the verify command call) returns one Check per
    name of ORDER, in that order."""
    checks = check_sources(str(built[1]))
    assert [c.name for c in checks] == list(vs.ORDER)
    assert all(c.passed for c in checks), [c.message for c in checks if not c.passed]


def test_a_stop_reports_the_later_checks_as_not_run(tmp_path):
    """No manifest: the FILES check fails with the reason and every other check is skipped."""
    checks = check_sources(str(tmp_path))
    assert [c.name for c in checks] == list(vs.ORDER)
    by = {c.name: c for c in checks}
    assert not by[vs.FILES].passed and not by[vs.FILES].skipped
    for name in vs.ORDER:
        if name != vs.FILES:
            assert by[name].skipped and by[name].message == f"not run: {vs.FILES} failed"


def test_sample_compares_only_n_records_deterministically(built):
    code, a = verify(built[1], "--sources", "--sample", 5)
    assert code == 0
    ev = a[vs.TOKENS]["evidence"]
    n = manifest(built[1])["counts"]["tokenized"]
    assert ev["records_compared"] == 5 and len(ev["sampled_source_index"]) == 5
    assert a[vs.TOKENS]["message"].startswith(f"5 of {n} packed records (--sample 5, --seed 0)")
    assert (
        verify(built[1], "--sources", "--sample", 5)[1][vs.TOKENS]["evidence"][
            "sampled_source_index"
        ]
        == ev["sampled_source_index"]
    )
    other = verify(built[1], "--sources", "--sample", 5, "--seed", 1)[1][vs.TOKENS]["evidence"]
    assert other["sampled_source_index"] != ev["sampled_source_index"]


def test_sample_skips_damage_outside_the_sample(pack):
    """--sample compares only the records it picks: the damaged one is found when picked, not
    otherwise (records are picked with numpy's default_rng(seed) among the packed ones)."""
    rel, table = st.read_shard(str(pack), 0)
    r, p, k, src = prompt_token(table)
    ids = st.token_column(table, "input_ids")
    ids[r, p] += 1
    st.write_shard(str(pack), rel, st.replace_columns(table, input_ids=ids))
    n = manifest(pack)["counts"][
        "tokenized"
    ]  # nothing dropped or skipped: record i = source_index i
    picks = {
        seed: int(np.random.default_rng(seed).choice(n, size=1, replace=False)[0])
        for seed in range(200)
    }
    hit = next(seed for seed, i in picks.items() if i == src)
    miss = next(seed for seed, i in picks.items() if i != src)
    code, checks = verify(pack, "--sources", "--sample", 1, "--seed", hit)
    assert checks[vs.TOKENS]["evidence"]["sampled_source_index"] == [src]
    assert code == 1 and f"(source_index {src}" in checks[vs.TOKENS]["message"]
    code, checks = verify(pack, "--sources", "--sample", 1, "--seed", miss)
    assert code == 0 and checks[vs.TOKENS]["evidence"]["sampled_source_index"] == [picks[miss]]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("--sample", "3"), "--sample N picks the records --sources compares; add --sources"),
        (("elsewhere.jsonl",), "is the data for --sources"),
        (("--sources", "--sample", "0"), "--sample 0 must be >= 1"),
    ],
)
def test_usage_errors(built, args, match):
    r = cli("verify", built[1], "--rows", 0, *args)
    assert r.exit_code == 2 and match in r.stderr, r.stderr


def test_self_test_with_sources_is_a_usage_error():
    r = cli("verify", "--self-test", "--sources")
    assert r.exit_code == 2 and "drop --sources" in r.stderr
