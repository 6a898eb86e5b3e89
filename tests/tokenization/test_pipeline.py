"""The cached read → normalize → tokenize pipeline: counts, skips, cache, pre-tokenized input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from packtool.api import load_tokenized
from packtool.config import ReadConfig, TokenizeConfig
from packtool.demo_data import write_sample
from packtool.errors import PacktoolError
from packtool.tokenization import pipeline

GOOD = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
NO_ANSWER = {"messages": [{"role": "user", "content": "anyone?"}]}
BAD_ROLE = {"messages": [{"role": "wizard", "content": "abracadabra"}]}


def write_jsonl(path, lines):
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return str(path)


def cfg(**read):
    return TokenizeConfig(num_proc=1, read=ReadConfig(**read))


@pytest.fixture(scope="module")
def sample_file(tmp_path_factory):
    return str(write_sample(tmp_path_factory.mktemp("s") / "sample.jsonl", n=60, seed=1))


def test_sample_tokenizes_and_caches(sample_file):
    a = load_tokenized(sample_file, cfg(), progress=False)
    assert len(a.dataset) == 60 and a.num_read == 60 and not a.skipped
    assert a.source_index.tolist() == list(range(60))
    assert a.format == "messages" and a.tokenizer["chat_template"] == "chatml-train"
    assert np.all(a.loss_counts > 0) and np.all(a.loss_counts < a.lengths)
    row = a.dataset[5]
    assert len(row["input_ids"]) == a.lengths[5] == row["length"]
    b = load_tokenized(sample_file, cfg(), progress=False)
    assert b.cache_hit and not a.cache_hit
    assert np.array_equal(a.lengths, b.lengths) and b.dataset[5] == row
    c = load_tokenized(sample_file, TokenizeConfig(num_proc=1, train_on="all"), progress=False)
    assert not c.cache_hit and np.array_equal(c.loss_counts, c.lengths)


def test_no_cache_recomputes(sample_file):
    load_tokenized(sample_file, cfg(), progress=False)
    again = load_tokenized(sample_file, TokenizeConfig(num_proc=1, cache=False), progress=False)
    assert not again.cache_hit


def test_multiprocess_equals_single(tmp_path):
    path = str(write_sample(tmp_path / "mp.jsonl", n=40, seed=3))
    one = load_tokenized(path, TokenizeConfig(num_proc=1, cache=False), progress=False)
    two = load_tokenized(path, TokenizeConfig(num_proc=2, cache=False), progress=False)
    assert one.dataset["input_ids"] == two.dataset["input_ids"]
    assert one.labels().to_pylist() == two.labels().to_pylist()


def test_malformed_line_is_fatal_with_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD, '{"messages": [', GOOD])
    with pytest.raises(PacktoolError, match=r"bad\.jsonl:2: .*--on-error skip"):
        load_tokenized(path, cfg(), progress=False)


def test_skip_counts_and_lists_everything(tmp_path):
    path = write_jsonl(
        tmp_path / "mixed.jsonl", [GOOD, '{"messages": [', BAD_ROLE, NO_ANSWER, GOOD]
    )
    td = load_tokenized(path, cfg(on_error="skip"), progress=False)
    assert td.num_read == 5
    assert [s.source_index for s in td.skipped] == [1, 2]
    assert td.skipped[0].line == 2 and "wizard" in td.skipped[1].reason
    assert td.source_index.tolist() == [0, 3, 4]
    assert td.loss_counts[1] == 0
    assert any("no loss token" in w and "3" in w for w in td.warnings)
    assert any(w.startswith("skipped 2 bad record") for w in td.warnings)


def test_unknown_role_is_fatal_by_default(tmp_path):
    path = write_jsonl(tmp_path / "role.jsonl", [GOOD, BAD_ROLE])
    with pytest.raises(PacktoolError, match=r"role\.jsonl:2: .*wizard"):
        load_tokenized(path, cfg(), progress=False)


def test_template_failure_per_example_is_skipped(tmp_path, qwen):
    tpl = tmp_path / "strict.jinja"
    tpl.write_text(
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}"
        "{% endif %}{{ m.content }}{% generation %}<|im_end|>{% endgeneration %}{% endfor %}"
    )
    sys_first = {"messages": [{"role": "system", "content": "s"}, *GOOD["messages"]]}
    path = write_jsonl(tmp_path / "t.jsonl", [GOOD, sys_first])
    with pytest.raises(
        PacktoolError,
        match=r"t\.jsonl:2: chat template '.*strict.jinja' failed on this record: no system",
    ):
        load_tokenized(path, TokenizeConfig(num_proc=1, chat_template=str(tpl)), progress=False)
    td = load_tokenized(
        path,
        TokenizeConfig(num_proc=1, chat_template=str(tpl), read=ReadConfig(on_error="skip")),
        progress=False,
    )
    assert td.source_index.tolist() == [0] and td.skipped[0].source_index == 1


def test_all_records_skipped_says_the_first_reason(tmp_path):
    """--on-error skip on a file whose every record is refused: the error says why, not only how
    many (the reason of the first skipped record, named by file and line)."""
    tpl = tmp_path / "strict.jinja"
    tpl.write_text(
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}"
        "{% endif %}{{ m.content }}{% generation %}<|im_end|>{% endgeneration %}{% endfor %}"
    )
    sys_first = {"messages": [{"role": "system", "content": "s"}, *GOOD["messages"]]}
    path = write_jsonl(tmp_path / "t.jsonl", [sys_first])
    skip = TokenizeConfig(num_proc=1, chat_template=str(tpl), read=ReadConfig(on_error="skip"))
    with pytest.raises(
        PacktoolError,
        match=r"no usable examples \(1 records read, 1 skipped; the first skipped, .*t\.jsonl:1: "
        r".*no system",
    ):
        load_tokenized(path, skip, progress=False)


def test_empty_input_is_an_error(tmp_path):
    path = write_jsonl(tmp_path / "empty.jsonl", [])
    with pytest.raises(PacktoolError, match="no usable examples"):
        load_tokenized(path, cfg(), progress=False)


@pytest.mark.parametrize("label_column", ["labels", "completion_mask", "assistant_masks", None])
def test_pretokenized_parquet(tmp_path, label_column):
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
    cols = {"input_ids": ids}
    if label_column == "labels":
        cols["labels"] = [[-100, -100, 7, 8], [-100, 10], [-100, -100, -100]]
    elif label_column:
        cols[label_column] = [[0, 0, 1, 1], [0, 1], [0, 0, 0]]
    pq.write_table(pa.table(cols), tmp_path / "tok.parquet")
    td = load_tokenized(str(tmp_path / "tok.parquet"), cfg(), progress=False)
    assert td.format == "pretokenized"
    assert td.lengths.tolist() == [4, 2, 3]
    assert td.dataset["input_ids"] == ids
    if label_column is None:
        assert td.loss_counts.tolist() == [4, 2, 3]
    else:
        assert td.labels().to_pylist() == [[-100, -100, 7, 8], [-100, 10], [-100, -100, -100]]
        assert td.loss_counts.tolist() == [2, 1, 0]


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (
            {"input_ids": [1, 2, 3], "labels": [1, 2]},
            r"tok\.jsonl:1: .*labels has 2 entries for 3 input_ids",
        ),
        (
            {"input_ids": [1, 2, 3], "labels": [2, 3, -100]},
            r"labels\[0\] = 2 but input_ids\[0\] = 1: .*pre-shifted",
        ),
        ({"input_ids": [1, 2, 3], "labels": [-1, 2, 3]}, r"labels\[0\] = -1 .*ignore index"),
        ({"input_ids": [1.5, 2, 3]}, r"input_ids\[0\] = 1\.5 is not a whole number"),
        ({"input_ids": ["a", "b"]}, r"input_ids holds <U1 values, not integers"),
        ({"input_ids": [[1, 2], [3]]}, r"input_ids is not a flat list of integers"),
        ({"input_ids": [1, -2]}, r"input_ids\[1\] = -2 is not a token id"),
        ({"input_ids": [1, 2], "attention_mask": [1]}, r"attention_mask has 1 entries for 2"),
    ],
)
def test_pretokenized_bad_records(tmp_path, record, message):
    path = write_jsonl(tmp_path / "tok.jsonl", [record])
    with pytest.raises(PacktoolError, match=message):
        load_tokenized(path, cfg(), progress=False)


def test_pretokenized_skip_and_attention_mask(tmp_path):
    path = write_jsonl(
        tmp_path / "tok.jsonl",
        [
            {"input_ids": [5, 6, 0, 0], "attention_mask": [1, 1, 0, 0]},
            {"input_ids": [1, 2], "labels": [1, -100]},
            {"input_ids": [7, 8, 9], "attention_mask": [1, 1, 1]},
        ],
    )
    td = load_tokenized(
        path,
        TokenizeConfig(num_proc=1, train_on="last", read=ReadConfig(on_error="skip")),
        progress=False,
    )
    assert td.dataset["input_ids"] == [[5, 6], [7, 8, 9]] and td.labels().to_pylist() == [
        [5, 6],
        [7, 8, 9],
    ]
    assert [s.source_index for s in td.skipped] == [
        1
    ] and "first record has no label column" in td.skipped[0].reason
    assert any("removed 2 padding token" in w for w in td.warnings)
    assert any("--train-on do not apply" in w for w in td.warnings)
    assert td.options["train_on"] is None and td.options["labels_from"] == "all"


def test_cache_key_follows_template_bytes(tmp_path, sample_file):
    tpl = tmp_path / "t.jinja"
    from pathlib import Path

    tpl.write_text(
        (Path(pipeline.__file__).parent / "templates" / "chatml-train.jinja").read_text()
    )
    a = load_tokenized(
        sample_file, TokenizeConfig(num_proc=1, chat_template=str(tpl)), progress=False
    )
    tpl.write_text(tpl.read_text().replace("<|im_start|>assistant", "<|im_start|>assistant model"))
    b = load_tokenized(
        sample_file, TokenizeConfig(num_proc=1, chat_template=str(tpl)), progress=False
    )
    assert not a.cache_hit and not b.cache_hit
    assert np.all(b.lengths > a.lengths)


# ---------------------------------------------------------------------------------------------
# records that used to crash a skip run, provenance, the cache that is never trusted blindly

CRASHERS = [
    '{"messages": ' + "[" * 100_000 + "]" * 100_000 + "}",  # nested 100k deep
    '{"messages": [{"role": "user", "content": "\\ud800"}, {"role": "assistant", "content": "x"}]}',
    '{"messages": [], "n": ' + "9" * 5000 + "}",  # an integer of 5,000 digits
]


def test_skip_run_survives_hostile_lines(tmp_path):
    path = write_jsonl(tmp_path / "hostile.jsonl", [GOOD, *CRASHERS, GOOD])
    td = load_tokenized(path, cfg(on_error="skip"), progress=False)
    assert td.source_index.tolist() == [0, 4]
    assert [(s.file, s.line) for s in td.skipped] == [(path, 2), (path, 3), (path, 4)]
    reasons = [s.reason for s in td.skipped]
    assert "nested" in reasons[0] and "surrogate" in reasons[1] and "digits" in reasons[2]
    for i, crash in enumerate(CRASHERS):
        one = write_jsonl(tmp_path / f"one{i}.jsonl", [GOOD, crash])
        with pytest.raises(PacktoolError, match=rf"one{i}\.jsonl:2: "):
            load_tokenized(one, cfg(), progress=False)


def test_folder_source_names_file_and_line(tmp_path):
    folder = tmp_path / "dir"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", [GOOD, GOOD])
    write_jsonl(folder / "b.jsonl", [GOOD, BAD_ROLE])
    with pytest.raises(PacktoolError, match=r"b\.jsonl:2: .*wizard"):
        load_tokenized(str(folder), cfg(), progress=False)
    td = load_tokenized(str(folder), cfg(on_error="skip"), progress=False)
    assert (
        td.skipped[0].file.endswith("b.jsonl")
        and td.skipped[0].line == 2
        and td.skipped[0].source_index == 3
    )


def _entry(td_key_dir):
    entries = sorted(td_key_dir.glob("tok-*"), key=lambda p: p.stat().st_mtime)
    return entries[-1]


# bytes flipped at 8 places; one flipped byte, warned and recomputed, runs in make test in
# test_damaged_cache_gives_the_no_cache_shards
@pytest.mark.slow
def test_cache_entry_is_checked_and_recomputed(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path / "cache"))
    path = str(write_sample(tmp_path / "c.jsonl", n=30, seed=2))
    fresh = load_tokenized(path, cfg(), progress=False)
    entry = _entry(tmp_path / "cache")
    reference = fresh.table.to_pydict()
    for name in ("data.arrow", "meta.json"):
        target = entry / name
        size = target.stat().st_size
        for at in (0, size // 3, size // 2, size - 2):
            blob = bytearray(target.read_bytes())
            blob[at] ^= 0x01
            target.write_bytes(bytes(blob))
            with pytest.warns(UserWarning, match=r"cache entry .*damaged"):
                again = load_tokenized(path, cfg(), progress=False)
            assert not again.cache_hit and again.table.to_pydict() == reference
            assert again.skipped == fresh.skipped and again.tokenizer == fresh.tokenizer
            hit = load_tokenized(path, cfg(), progress=False)
            assert hit.cache_hit and hit.table.to_pydict() == reference
    (entry / "data.arrow").unlink()
    with pytest.warns(UserWarning, match="missing"):
        assert not load_tokenized(path, cfg(), progress=False).cache_hit


def test_stale_work_folders_are_removed(tmp_path, monkeypatch):
    import subprocess

    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path / "cache"))
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / "cache" / f"work-abc-{dead.pid}-1"
    stale.mkdir(parents=True)
    (stale / "data.arrow").write_bytes(b"half")
    load_tokenized(str(write_sample(tmp_path / "w.jsonl", n=5, seed=0)), cfg(), progress=False)
    assert not stale.exists()
    assert not list((tmp_path / "cache").glob("work-*"))


def test_concurrent_runs_share_one_entry(tmp_path):
    import os
    import subprocess
    import sys

    path = str(write_sample(tmp_path / "cc.jsonl", n=200, seed=4))
    env = {**os.environ, "PACKTOOL_CACHE": str(tmp_path / "cache")}
    code = (
        "import sys; from packtool.api import load_tokenized; from packtool.config import TokenizeConfig; "
        "td = load_tokenized(sys.argv[1], TokenizeConfig(num_proc=1), progress=False); "
        "print(int(td.lengths.sum()))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, path],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    assert len({o for o, _ in outs}) == 1
    assert len(list((tmp_path / "cache").glob("tok-*"))) == 1 and not list(
        (tmp_path / "cache").glob("work-*")
    )
    again = subprocess.run(
        [sys.executable, "-c", code, path], env=env, capture_output=True, text=True
    )
    assert again.stdout == outs[0][0] and "damaged" not in again.stderr


def test_damaged_cache_gives_the_no_cache_shards(tmp_path, monkeypatch):
    """CLI: a byte flipped in the entry → one warning line naming it, then the --no-cache shards."""
    from typer.testing import CliRunner

    from packtool.cli import app

    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path / "cache"))
    data = str(write_sample(tmp_path / "d.jsonl", n=40, seed=5))
    run = CliRunner().invoke
    base = ["pack", data, "--len", "1024", "--num-proc", "1", "--overflow", "split", "--force"]
    assert run(app, [*base, "--out", str(tmp_path / "ref"), "--no-cache"]).exit_code == 0
    entry = _entry(tmp_path / "cache") / "data.arrow"
    blob = bytearray(entry.read_bytes())
    blob[len(blob) // 2] ^= 0x10
    entry.write_bytes(bytes(blob))
    result = run(app, [*base, "--out", str(tmp_path / "again")])
    assert result.exit_code == 0, result.output
    assert "warning: tokenization cache entry" in result.output and "damaged" in result.output
    ref = sorted((tmp_path / "ref" / "data").glob("*.parquet"))
    again = sorted((tmp_path / "again" / "data").glob("*.parquet"))
    assert [p.read_bytes() for p in ref] == [p.read_bytes() for p in again]


# the in-process check (num_proc 1) runs in make test in the folder test below, the worker's here
@pytest.mark.parametrize("num_proc", [pytest.param(1, marks=pytest.mark.slow), 2])
def test_fast_path_that_differs_is_not_used(tmp_path, monkeypatch, num_proc):
    """A fast path that gives other ids on the run's first examples: auto falls back to hf (with a
    warning naming the record), forced fastokens is an error; the check runs in a worker too."""
    from packtool.tokenization import backends

    path = str(write_sample(tmp_path / "m.jsonl", n=30, seed=6))
    ref = load_tokenized(
        path, TokenizeConfig(num_proc=num_proc, cache=False, tokenizer_backend="hf"), progress=False
    )
    real = backends.FastBackend.encode_spans

    def wrong(self, texts, spans):
        ids, offsets, mask = real(self, texts, spans)
        return ids + 1, offsets, mask

    monkeypatch.setattr(backends.FastBackend, "encode_spans", wrong)
    td = load_tokenized(path, TokenizeConfig(num_proc=num_proc, cache=False), progress=False)
    assert td.backend["name"] == "hf" and "differs" in td.backend["reason"]
    assert any("differs from tokenizers + jinja on" in w and "m.jsonl:1" in w for w in td.warnings)
    assert td.table.to_pydict() == ref.table.to_pydict()
    with pytest.raises(PacktoolError, match="--tokenizer-backend fastokens: .*differs"):
        load_tokenized(
            path,
            TokenizeConfig(num_proc=num_proc, cache=False, tokenizer_backend="fastokens"),
            progress=False,
        )


@pytest.mark.parametrize("building", [True, False])
def test_first_probe_reference_encoded_here_or_in_a_worker(tmp_path, monkeypatch, building):
    """With workers, the first probe's reference half is encoded in this process while the fast
    backend still builds (`building`), else in a worker: either way an honest run is checked on the
    same examples and a fast path that differs on the first record is caught."""
    from packtool.tokenization import backends
    from packtool.tokenization.pipeline import RunPlan

    monkeypatch.setattr(RunPlan, "building", lambda self: building)
    path = str(write_sample(tmp_path / "m.jsonl", n=30, seed=6))
    honest = load_tokenized(path, TokenizeConfig(num_proc=2, cache=False), progress=False)
    assert honest.backend["check"] == {"examples": 30, "identical": True}
    real = backends.FastBackend.encode_spans

    def wrong(self, texts, spans):
        ids, offsets, mask = real(self, texts, spans)
        return ids + 1, offsets, mask

    monkeypatch.setattr(backends.FastBackend, "encode_spans", wrong)
    td = load_tokenized(path, TokenizeConfig(num_proc=2, cache=False), progress=False)
    assert td.backend["name"] == "hf" and "m.jsonl:1" in td.backend["reason"]
    assert td.table.to_pydict() == honest.table.to_pydict()


# the check in a worker (num_proc 2) runs in make test in the test above
@pytest.mark.parametrize("num_proc", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_fast_path_is_probed_on_every_file_of_a_folder(tmp_path, monkeypatch, num_proc):
    """The exactness probe covers each file of a mixed folder, not only the run's first examples:
    a fast path that is wrong only on the second file (another format) is caught there, auto falls
    back to hf naming that file's record, forced fastokens refuses; an honest run probes both."""
    from packtool.tokenization import backends

    folder = tmp_path / "mixed"
    folder.mkdir()
    write_sample(folder / "a.jsonl", n=20, seed=3)
    (folder / "b.json").write_text(
        json.dumps(
            [{"instruction": f"say ZEBRA{i}", "input": "", "output": f"ZEBRA{i}"} for i in range(5)]
        )
    )
    honest = load_tokenized(str(folder), TokenizeConfig(num_proc=num_proc, cache=False), False)
    assert honest.backend["name"] == "fastokens"
    assert honest.backend["check"] == {"examples": 25, "identical": True, "files": 2}
    ref = load_tokenized(
        str(folder),
        TokenizeConfig(num_proc=num_proc, cache=False, tokenizer_backend="hf"),
        progress=False,
    )
    real = backends.FastBackend.encode_spans

    def wrong_on_b(self, texts, spans):
        ids, offsets, mask = real(self, texts, spans)
        return (ids + 1 if any("ZEBRA" in t for t in texts) else ids), offsets, mask

    monkeypatch.setattr(backends.FastBackend, "encode_spans", wrong_on_b)
    td = load_tokenized(str(folder), TokenizeConfig(num_proc=num_proc, cache=False), False)
    assert td.backend["name"] == "hf" and "b.json record 0" in td.backend["reason"]
    assert td.table.to_pydict() == ref.table.to_pydict()
    with pytest.raises(PacktoolError, match="fastokens: .*differs .*b.json record 0"):
        load_tokenized(
            str(folder),
            TokenizeConfig(num_proc=num_proc, cache=False, tokenizer_backend="fastokens"),
            progress=False,
        )


def test_fast_check_probes_and_reports():
    """The one fast-path check (the local pool's and the Ray engine's): the run's first file with
    records (CHECK_EXAMPLES), the first CHECK_FILES files, then only new formats; the report says
    the examples compared and, over two or more files, the files."""
    import pytest

    from packtool.errors import PacktoolError
    from packtool.tokenization import pipeline as fc
    from packtool.tokenization.pipeline import BackendReport

    def fast(renderer, requested):
        return fc.FastCheck(BackendReport("fastokens", requested, renderer, {"examples": 0}))

    files = [(f"f{i}.jsonl", "messages", 1000) for i in range(70)]
    files[2] = ("f2.jsonl", "messages", 0)  # no records: not read, not probed
    files[66] = ("f66.json", "alpaca", 5)
    probes = fast("native", "auto").probes(files)
    assert probes[0] == ("f0.jsonl", "messages", fc.CHECK_EXAMPLES)
    assert all(n == fc.CHECK_PER_FILE for _, _, n in probes[1 : fc.CHECK_FILES])
    assert [p[0] for p in probes[fc.CHECK_FILES :]] == ["f66.json"] and probes[-1][2] == 5
    assert "f2.jsonl" not in {p[0] for p in probes} and len(probes) == fc.CHECK_FILES + 1

    def concluded(renderer, requested, results):
        check = fast(renderer, requested)
        check.probes([(f"f{i}", "messages", n) for i, (n, _) in enumerate(results)])
        for n, where in results:
            check.conclude(n, where)
        return check.report.to_dict()

    assert concluded("native", "auto", [(256, None), (32, None)]) == {
        "name": "fastokens",
        "requested": "auto",
        "renderer": "native",
        "check": {"examples": 288, "identical": True, "files": 2},
    }
    assert concluded("jinja", "auto", [(7, None)])["check"] == {"examples": 7, "identical": True}
    with pytest.raises(fc.UseReference, match="a.jsonl:3"):
        concluded("native", "auto", [(256, None), (32, "a.jsonl:3")])
    with pytest.raises(PacktoolError, match="--tokenizer-backend fastokens"):
        concluded("jinja", "fastokens", [(5, "b.json record 2")])


def test_an_entry_written_before_the_sources_were_hashed_is_hit_later(sample_file):
    """With --no-cache (or an empty cache) the key is computed at commit, once the sources' sha256
    thread is done: the entry is the one a cached run looks up."""
    from packtool.tokenization import cache

    first = load_tokenized(sample_file, TokenizeConfig(num_proc=1, cache=False), progress=False)
    assert not first.cache_hit and cache.has_entries()
    again = load_tokenized(sample_file, cfg(), progress=False)
    assert again.cache_hit and again.sources == first.sources
    assert (
        again.sources[0].sha256
        == __import__("hashlib").sha256(open(sample_file, "rb").read()).hexdigest()
    )
