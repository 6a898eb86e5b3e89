"""verify --sources: tokenize the pack's sources again and compare every document with the shards.

Integrity proves a pack is self-consistent; it cannot see damage that is consistent but wrong (a
prompt token turned into a trained label, a token id changed, every count and checksum re-signed).
This layer recomputes what the shards must hold from the data itself:

    manifest  sources [path, size, sha256]  tokenizer {files_hash, chat_template_hash}  options
        │ sha256 of each source file; TokenizeConfig rebuilt from the recorded options, cache off
        ▼ (a poisoned tokenization cache cannot hide damage)
    pipeline.load_tokenized ──▶ per record: input_ids, labels, source_index   (the path pack used)
        │ pack.overflow.apply_overflow(lengths, pack_len, overflow)                   (the packer's own)
        ▼
    pieces  record, start, length        drop: none | truncate: [0, L) | split: [0, L), [L, 2L), ...
        │ label of every piece's first token -> -100                          (kernels.copy_rows)
        ▼
    shard rows, batch by batch: document k of a row starts at cumsum(seq_lengths)[k-1] and is the
    piece of its source_index (a split record's parts: matched by a hash of their ids)
        ──▶ one flat gather per side, one vector compare; a difference names the record (file:line),
            the shard, the row, the position, and shows got vs expected ids and labels

Cost: the tokenization (as `pack`), one more sha256 of the sources, and a few whole-array passes
over the shards' tokens (~0.1 s per million tokens); `--sample N` compares N records only.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field

import numpy as np

from packtool import schema
from packtool.errors import PacktoolError
from packtool.verify import Check

OPTIONS = "sources options"
FILES = "sources sha256"
TOKENIZER = "sources tokenizer"
TEMPLATE = "sources chat template"
ACCOUNT = "sources accounting"
TOKENS = "sources tokens"
ORDER = (OPTIONS, FILES, TOKENIZER, TEMPLATE, ACCOUNT, TOKENS)

MAX_EXAMPLES = 5
WINDOW = 3  # tokens shown on each side of a difference
BATCH_TOKENS = 1 << 22
# keys of manifest["options"] that are not TokenizeConfig fields: the DATA argument as given to
# pack, and where the labels of pre-tokenized input came from
EXTRA_OPTIONS = {"input", "labels_from"}


class _Stop(Exception):
    """A check failed in a way that leaves nothing to compare: the remaining checks are skipped."""

    def __init__(self, name: str, message: str, evidence: dict | None = None):
        super().__init__(message)
        self.check = Check(name, False, message, evidence or {})


# ---------------------------------------------------------------------------------------------
# the recorded options -> TokenizeConfig


def _tuples(v):
    """JSON lists back to the tuples a frozen config holds (columns, roles: pairs)."""
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _build(cls, d: dict, where: str, missing: list[str]):
    """`cls(**d)` for a (nested) frozen dataclass: keys this packtool does not know are refused,
    missing ones take the dataclass's default (and are listed in `missing`)."""
    import packtool

    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(d) - set(fields) - (EXTRA_OPTIONS if where == "options" else set()))
    if unknown:
        raise _Stop(OPTIONS, f"manifest {where}.{unknown[0]} = {d[unknown[0]]!r} is unknown to packtool "
                    f"{packtool.__version__}: the pack was made by a packtool with options this one does not have; "
                    f"verify with that version (or a newer one)", {"unknown": [f"{where}.{k}" for k in unknown]})
    kw = {}
    for name, f in fields.items():
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        if name not in d:
            missing.append(f"{where}.{name}")
            continue
        v = d[name]
        if v is None and default is not None:  # recorded as "not applicable" (e.g. train_on of pre-tokenized input)
            continue
        if dataclasses.is_dataclass(default) and isinstance(v, dict):
            v = _build(type(default), v, f"{where}.{name}", missing)
        kw[name] = _tuples(v)
    try:
        return cls(**kw)
    except (TypeError, ValueError) as e:
        raise _Stop(OPTIONS, f"manifest {where} cannot be used: {e}") from None


def tokenize_config_from(manifest: dict):
    """(TokenizeConfig, keys not recorded) that re-tokenizes the pack's sources: the recorded
    options with the cache off. Raises _Stop for options this packtool does not know."""
    from packtool.config import TokenizeConfig

    options = manifest.get("options")
    if not isinstance(options, dict):
        raise _Stop(OPTIONS, f"manifest options is {options!r}, not an object: the pack cannot be tokenized again")
    d = {k: v for k, v in options.items() if k not in EXTRA_OPTIONS}
    missing: list[str] = []
    if "tokenizer" not in d:  # packed before the options were recorded: the tokenizer's recorded name
        name = (manifest.get("tokenizer") or {}).get("name")
        d["tokenizer"] = None if name is None or "built-in" in str(name) else name
    cfg = _build(TokenizeConfig, d, "options", missing)
    cfg = dataclasses.replace(cfg, cache=False, num_proc=None)
    return cfg, [m for m in missing if m not in ("options.cache", "options.num_proc")]


def _options_text(cfg) -> str:
    """The options that differ from a default TokenizeConfig, e.g. 'train_on last, read.format alpaca'."""
    from packtool.config import TokenizeConfig

    base = dataclasses.asdict(TokenizeConfig())
    flat = lambda d, p="": [(f"{p}{k}", v) for k, v in d.items() if not isinstance(v, dict)] + [  # noqa: E731
        x for k, v in d.items() if isinstance(v, dict) for x in flat(v, f"{p}{k}.")]
    want = dict(flat(base))
    diff = [f"{k} {v!r}" for k, v in flat(dataclasses.asdict(cfg)) if k not in ("cache", "num_proc") and want.get(k) != v]
    return "tokenize options rebuilt from the manifest: " + (", ".join(diff) if diff else "all defaults")


# ---------------------------------------------------------------------------------------------
# the data


def _recorded_data(manifest: dict, pack: str) -> str:
    """What to read when --sources names no DATA: the input given to pack, or the one recorded
    source, or the folder holding all of them. Relative paths are relative to the directory pack
    ran in: tried from here, then beside the pack folder."""
    options = manifest.get("options") if isinstance(manifest.get("options"), dict) else {}
    sources = [s for s in manifest.get("sources") or [] if isinstance(s, dict) and s.get("path")]
    rec = options.get("input")
    if not rec:
        if not sources:
            raise _Stop(FILES, "the manifest records no source files (packed from data in memory?): nothing to "
                        "read again; pass the data: packtool verify PACK --sources DATA")
        paths = [str(s["path"]) for s in sources]
        rec = paths[0] if len(paths) == 1 else os.path.commonpath(paths)
    rec = str(rec)
    if os.path.isabs(rec):
        return rec
    for base in (os.getcwd(), os.path.dirname(os.path.abspath(pack))):
        cand = os.path.join(base, rec)
        if os.path.exists(cand):
            return cand if base != os.getcwd() else rec
    return rec  # a hub id, or a path that moved: located (or refused) like any input


def _files_check(data: str, manifest: dict, split: str) -> tuple[Check, list]:
    from packtool.io import readers

    try:
        now = readers.resolve_sources(data, split)
    except PacktoolError as e:
        raise _Stop(FILES, f"cannot read the sources at {data}: {e}; if the data moved, pass it: packtool verify "
                    f"PACK --sources DATA") from None
    rec = sorted((s for s in manifest.get("sources") or [] if isinstance(s, dict)), key=lambda s: str(s.get("path")))
    ev = {"data": data, "files": len(now), "recorded": len(rec)}
    problems = []
    if len(now) != len(rec):
        problems.append(f"{data} holds {len(now)} source file(s), the manifest records {len(rec)} "
                        f"({', '.join(str(s.get('path')) for s in rec[:5])}); pass the data that was packed: "
                        f"packtool verify PACK --sources DATA")
    else:
        for f, r in zip(now, rec, strict=True):
            if f.sha256 != r.get("sha256"):
                was = f" (recorded as {r.get('path')})" if os.path.basename(f.path) != os.path.basename(str(r.get("path"))) else ""
                problems.append(f"{f.path}{was}: sha256 {f.sha256[:12]}… ({f.size} bytes), the manifest records "
                                f"{str(r.get('sha256'))[:12]}… ({r.get('size')} bytes): the source changed after packing")
    if problems:
        raise _Stop(FILES, "; ".join(problems), ev)
    return Check(FILES, True, f"{len(now)} source file(s) at {data}: sha256 match the manifest", ev), now


def _tokenizer_check(cfg, manifest: dict) -> Check:
    rec = manifest.get("tokenizer") if isinstance(manifest.get("tokenizer"), dict) else {}
    want = rec.get("files_hash")
    if not want:
        return Check(TOKENIZER, False, "no tokenizer files hash in the manifest (pre-tokenized input): ids are read "
                     "as they are", skipped=True)
    from packtool.tokenization.loading import load_spec

    what = "the built-in tokenizer" if cfg.tokenizer is None else f"tokenizer {cfg.tokenizer}"
    try:
        spec = load_spec(cfg.tokenizer)
    except PacktoolError as e:
        raise _Stop(TOKENIZER, f"{what} (recorded in the manifest) cannot be loaded: {e}") from None
    ev = {"tokenizer": spec.name, "files_hash": spec.files_hash, "recorded": want}
    if spec.files_hash != want:
        raise _Stop(TOKENIZER, f"{what}: files hash {spec.files_hash}, the manifest records {want} "
                    f"({rec.get('name')}): the tokenizer's files changed since packing", ev)
    return Check(TOKENIZER, True, f"{spec.name}: files hash {want} matches the manifest", ev)


def _template_check(cfg, manifest: dict, tokenized) -> Check:
    rec = manifest.get("tokenizer") if isinstance(manifest.get("tokenizer"), dict) else {}
    now = tokenized.tokenizer or {}
    want, have = rec.get("chat_template_hash"), now.get("chat_template_hash")
    if want is None and have is None:
        return Check(TEMPLATE, False, "no chat template (pre-tokenized input)", skipped=True)
    how = (f"--chat-template {cfg.chat_template}" if cfg.chat_template is not None else
           "no --chat-template: the tokenizer's own, or chatml-train for the built-in tokenizer")
    ev = {"template": now.get("chat_template"), "hash": have, "recorded": want}
    if have != want:
        return Check(TEMPLATE, False, f"chat template '{now.get('chat_template')}' (resolved from the recorded {how}) "
                     f"hashes {have}, the manifest records {want} ('{rec.get('chat_template')}'): the template changed "
                     f"since packing, so ids and labels may differ", ev)
    return Check(TEMPLATE, True, f"'{now.get('chat_template')}' ({how}): hash {want} matches the manifest", ev)


# ---------------------------------------------------------------------------------------------
# where a record came from (file:line), for messages


class _Provenance:
    """source_index -> 'data.jsonl:12' (or 'data.parquet record 3'), read lazily and only for the
    few records a message names."""

    def __init__(self, data: str, read):
        self.data, self.read = data, read
        self.known: dict[int, str] = {}

    def resolve(self, indices) -> None:
        want = {int(i) for i in indices} - set(self.known)
        if not want:
            return
        from packtool.io import readers

        try:
            for b in readers.iter_batches(readers.locate(self.data, self.read.split), self.read, 4096):
                hits = [i for i in want if b.start <= i < b.start + len(b)]
                for i in hits:
                    self.known[i] = b.where(i - b.start)
                want.difference_update(hits)
                if not want or b.start > max(want):
                    break
        except Exception:  # provenance is decoration: never let it hide the difference itself
            pass
        for i in want:
            self.known[i] = f"record {i}"

    def __call__(self, i: int) -> str:
        self.resolve([i])
        return self.known[int(i)]


# ---------------------------------------------------------------------------------------------
# expected pieces


@dataclass
class _Expected:
    """The re-tokenized records and, per record, its pieces as the packer cuts them."""

    ids_col: object  # ChunkedArray list<int32>, per tokenized record
    lab_col: object
    src: np.ndarray  # source_index per record (sorted)
    lengths: np.ndarray
    piece_row: np.ndarray  # record of each piece
    piece_start: np.ndarray
    piece_len: np.ndarray
    first_piece: np.ndarray  # per record: index of its first piece
    num_pieces: np.ndarray  # per record: 0 (dropped), 1, or the parts of a split record
    pack_len: int
    overflow: str
    pieces: object = None  # the packer's Pieces (dropped, truncated, split lists)
    hashes: dict[int, np.ndarray] = field(default_factory=dict)  # record -> uint64 hash of each part

    def record_of(self, source_index: np.ndarray) -> np.ndarray:
        """Record (row of the tokenized table) of each source index, -1 if it is not one."""
        pos = np.searchsorted(self.src, source_index)
        pos = np.minimum(pos, max(self.src.size - 1, 0))
        ok = (self.src.size > 0) & (self.src[pos] == source_index) if self.src.size else np.zeros(source_index.shape, bool)
        return np.where(ok, pos, -1)

    def gather(self, records: np.ndarray, starts: np.ndarray, lengths: np.ndarray):
        """(ids, labels, offsets): the pieces [start, start + length) of `records`, back to back."""
        import pyarrow as pa

        from packtool.verify.scan import flat_list

        uniq, inv = np.unique(records, return_inverse=True)
        take = pa.array(uniq.astype(np.int64))
        off_i, ids = flat_list(self.ids_col.take(take).combine_chunks())
        off_l, lab = flat_list(self.lab_col.take(take).combine_chunks())
        base = off_i[:-1][inv] + starts
        seg, intra = _segments(lengths)
        at = base[seg] + intra
        out_off = np.concatenate(([0], np.cumsum(lengths)))
        return ids[at].astype(np.int32, copy=False), lab[at].astype(np.int32, copy=False), out_off

    def part_hashes(self, record: int) -> np.ndarray:
        if record not in self.hashes:
            p0, n = int(self.first_piece[record]), int(self.num_pieces[record])
            sl = slice(p0, p0 + n)
            ids, _, off = self.gather(self.piece_row[sl], self.piece_start[sl], self.piece_len[sl])
            self.hashes[record] = _hashes(ids, off, self.pack_len)
        return self.hashes[record]


def _segments(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(segment, index within it) of every element of segments of `lengths` laid back to back."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    seg = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
    intra = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return seg, intra


_MULT: dict[int, np.ndarray] = {}


def _hashes(ids: np.ndarray, off: np.ndarray, pack_len: int) -> np.ndarray:
    """A uint64 hash of each segment off[i]:off[i+1] of ids (position-weighted sum, wrapping):
    tells the parts of a split record apart. Equal hash -> compared anyway, token by token."""
    if pack_len not in _MULT:
        from packtool.verify.sampling import mix

        _MULT[pack_len] = mix(np.arange(pack_len, dtype=np.uint64)) | np.uint64(1)
    lens = np.diff(off)
    if not lens.size:
        return np.zeros(0, np.uint64)
    _, intra = _segments(lens)
    with np.errstate(over="ignore"):
        terms = (ids.astype(np.uint64) + np.uint64(1)) * _MULT[pack_len][np.minimum(intra, pack_len - 1)]
    return np.add.reduceat(terms, off[:-1].astype(np.int64))


def _expected(tokenized, manifest: dict) -> _Expected:
    from packtool.pack import apply_overflow

    table = tokenized.table
    table = getattr(getattr(table, "data", None), "table", table)  # a datasets.Dataset: its Arrow table
    L, overflow = int(manifest["pack_len"]), str(manifest.get("overflow", "drop"))
    lengths = np.ascontiguousarray(tokenized.lengths, dtype=np.int64)
    src = np.ascontiguousarray(tokenized.source_index, dtype=np.int64)
    if src.size > 1 and np.any(np.diff(src) <= 0):
        raise _Stop(TOKENS, "the re-tokenized records are not in source order: cannot match them to the shards")
    try:
        pieces = apply_overflow(lengths, src, L, overflow if overflow != "error" else "drop")
    except PacktoolError as e:
        raise _Stop(TOKENS, f"--overflow {overflow}: {e}") from None
    num = np.bincount(pieces.row, minlength=lengths.size).astype(np.int64)
    first = np.searchsorted(pieces.row, np.arange(lengths.size))
    return _Expected(table.column("input_ids"), table.column("labels"), src, lengths, pieces.row, pieces.start,
                     pieces.length, first, num, L, overflow, pieces)


# ---------------------------------------------------------------------------------------------
# the comparison


@dataclass
class _Doc:
    """Documents of one batch of shard rows, flat: shard row, index in row, first column, length."""

    row: np.ndarray
    k: np.ndarray
    col: np.ndarray
    length: np.ndarray
    src: np.ndarray


@dataclass
class _Compare:
    exp: _Expected
    where: _Provenance
    docs_compared: int = 0
    tokens_compared: int = 0
    first_token_loss: int = 0  # pieces whose first label carried loss before the packer masked it
    failed_docs: int = 0
    examples: list[dict] = field(default_factory=list)
    seen: np.ndarray | None = None  # per piece: how many shard documents matched it
    deferred: list[tuple] = field(default_factory=list)  # split parts without a hash match
    stray: list[str] = field(default_factory=list)  # documents whose source is no record / dropped / repeated
    stray_count: int = 0

    def fail(self, message: str, **ev) -> None:
        self.failed_docs += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append({"message": message, **ev})

    def stray_doc(self, message: str) -> None:
        self.stray_count += 1
        if len(self.stray) < MAX_EXAMPLES:
            self.stray.append(message)


def _piece_note(exp: _Expected, p: int) -> str:
    r = int(exp.piece_row[p])
    n, parts = int(exp.lengths[r]), int(exp.num_pieces[r])
    if parts > 1:
        s = int(exp.piece_start[p])
        return f", part {p - int(exp.first_piece[r]) + 1} of {parts}: record tokens {s}..{s + int(exp.piece_len[p]) - 1}"
    if n > exp.pack_len:
        return f", truncated to {exp.pack_len} of {n} tokens"
    return ""


def _window(a: np.ndarray, t: int, stop: int) -> list[int]:
    return a[max(0, t - WINDOW):stop].tolist()


def _compare_docs(cmp: _Compare, shard: str, row0: int, docs: _Doc, pieces: np.ndarray, got_ids: np.ndarray,
                  got_lab: np.ndarray, got_start: np.ndarray) -> None:
    """Compare shard documents with their pieces, all at once. got_* are flat token buffers;
    document j is got_*[got_start[j]:+docs.length[j]]."""
    exp = cmp.exp
    if not pieces.size:
        return
    elen = exp.piece_len[pieces]
    e_ids, e_lab, e_off = exp.gather(exp.piece_row[pieces], exp.piece_start[pieces], elen)
    cmp.first_token_loss += int(np.count_nonzero(e_lab[e_off[:-1]] != schema.IGNORE_INDEX))
    e_lab[e_off[:-1]] = schema.IGNORE_INDEX  # as kernels.copy_rows stores it: no document's first token is trained
    m = np.minimum(docs.length, elen)
    seg, intra = _segments(m)
    gi = got_start[seg] + intra
    ei = e_off[:-1][seg] + intra
    diff = (got_ids[gi] != e_ids[ei]) | (got_lab[gi] != e_lab[ei])
    cmp.docs_compared += int(pieces.size)
    cmp.tokens_compared += int(m.sum())
    bad_at = np.full(pieces.size, -1, np.int64)
    hits = np.flatnonzero(diff)
    if hits.size:
        d, first = np.unique(seg[hits], return_index=True)
        bad_at[d] = intra[hits[first]]
    longer = (bad_at < 0) & (docs.length != elen)
    bad_at[longer] = m[longer]
    bad = np.flatnonzero(bad_at >= 0)
    if not bad.size:
        return
    cmp.where.resolve(docs.src[bad[:MAX_EXAMPLES]])
    for j in bad.tolist():
        if len(cmp.examples) >= MAX_EXAMPLES:
            cmp.failed_docs += 1
            continue
        p, t = int(pieces[j]), int(bad_at[j])
        row, k, c = row0 + int(docs.row[j]), int(docs.k[j]), int(docs.col[j])
        s = int(docs.src[j])
        head = f"{cmp.where(s)} (source_index {s}{_piece_note(exp, p)}) -> {shard} row {row}"
        g0, e0 = int(got_start[j]), int(e_off[j])
        gl, el = int(docs.length[j]), int(elen[j])
        g_ids, g_lab = got_ids[g0:g0 + gl], got_lab[g0:g0 + gl]
        x_ids, x_lab = e_ids[e0:e0 + el], e_lab[e0:e0 + el]
        if t >= min(gl, el):
            what = (f"document {k} holds {gl} tokens, the record gives {el} when tokenized again "
                    f"({'documents merged or tokens added' if gl > el else 'tokens lost'})")
            msg = f"{head} document {k}: {what}"
            cmp.fail(msg, shard=shard, row=row, document=k, position=c + t, source_index=s,
                     got_length=gl, expected_length=el)
            continue
        parts = []
        if g_ids[t] != x_ids[t]:
            parts.append(f"input_id {int(g_ids[t])}, expected {int(x_ids[t])}")
        if g_lab[t] != x_lab[t]:
            why = (" (a prompt token trained)" if x_lab[t] == schema.IGNORE_INDEX else
                   " (a trained token masked)" if g_lab[t] == schema.IGNORE_INDEX else "")
            parts.append(f"label {int(g_lab[t])}, expected {int(x_lab[t])}{why}")
        a, b = max(0, t - WINDOW), min(gl, el, t + WINDOW + 1)
        msg = (f"{head} position {c + t} (document {k}, token {t}): {'; '.join(parts)}; "
               f"row positions {c + a}..{c + b - 1}: input_ids got {_window(g_ids, t, b)} expected "
               f"{_window(x_ids, t, b)}, labels got {_window(g_lab, t, b)} expected {_window(x_lab, t, b)}")
        cmp.fail(msg, shard=shard, row=row, document=k, position=c + t, source_index=s,
                 got={"input_id": int(g_ids[t]), "label": int(g_lab[t])},
                 expected={"input_id": int(x_ids[t]), "label": int(x_lab[t])})


def _scan_shard(cmp: _Compare, pack: str, shard: str, wanted: np.ndarray | None) -> None:
    import pyarrow.parquet as pq

    from packtool.verify.scan import flat_fixed, flat_list

    exp = cmp.exp
    L = exp.pack_len
    pf = pq.ParquetFile(os.path.join(pack, shard))
    row0 = 0
    cols = ["input_ids", "labels", "seq_lengths", "source_index"]
    for batch in pf.iter_batches(batch_size=max(1, BATCH_TOKENS // L), columns=cols):
        R = batch.num_rows
        if not R:
            continue
        seq_off, seq = flat_list(batch.column("seq_lengths"))
        src_off, src = flat_list(batch.column("source_index"))
        seq = seq.astype(np.int64)
        nd, ns = np.diff(seq_off), np.diff(src_off)
        cs = np.concatenate(([0], np.cumsum(seq)))
        ok_row = (nd == ns) & (cs[seq_off[1:]] - cs[seq_off[:-1]] <= L) & (np.minimum.reduceat(
            np.concatenate((seq, [1])), np.minimum(seq_off[:-1], seq.size)) >= 1)
        bad_rows = np.flatnonzero(~ok_row)
        for r in bad_rows[:MAX_EXAMPLES].tolist():
            cmp.stray_doc(f"{shard} row {row0 + r}: seq_lengths {seq[seq_off[r]:seq_off[r + 1]].tolist()} with "
                          f"source_index {src[src_off[r]:src_off[r + 1]].tolist()} cannot be matched (see the integrity "
                          "checks): its documents are not compared")
        cmp.stray_count += max(0, bad_rows.size - MAX_EXAMPLES)
        keep = np.repeat(ok_row, nd)
        row = np.repeat(np.arange(R), nd)[keep]
        lens = seq[keep]
        col = (cs[:-1] - np.repeat(cs[seq_off[:-1]], nd))[keep]
        k = (np.arange(seq.size) - np.repeat(seq_off[:-1], nd))[keep]
        s = src.astype(np.int64)[np.repeat(ok_row, ns)]
        if wanted is not None:
            sel = np.isin(s, wanted)
            row, lens, col, k, s = row[sel], lens[sel], col[sel], k[sel], s[sel]
        if not s.size:
            row0 += R
            continue
        ids = flat_fixed(batch.column("input_ids"), R, L).reshape(-1)
        lab = flat_fixed(batch.column("labels"), R, L).reshape(-1)
        start = row * L + col
        rec = exp.record_of(s)
        pieces = np.full(s.size, -1, np.int64)
        one = (rec >= 0) & (exp.num_pieces[np.maximum(rec, 0)] == 1)
        pieces[one] = exp.first_piece[rec[one]]
        for j in np.flatnonzero(rec < 0)[:MAX_EXAMPLES].tolist():
            cmp.stray_doc(f"{shard} row {row0 + int(row[j])} document {int(k[j])}: source_index {int(s[j])} is no "
                          "record of the sources tokenized again (skipped, or beyond the input)")
        cmp.stray_count += max(0, int((rec < 0).sum()) - MAX_EXAMPLES)
        dropped = np.flatnonzero((rec >= 0) & (exp.num_pieces[np.maximum(rec, 0)] == 0))
        cmp.where.resolve(s[dropped[:MAX_EXAMPLES]])
        for j in dropped[:MAX_EXAMPLES].tolist():
            r = int(rec[j])
            cmp.stray_doc(f"{cmp.where(int(s[j]))} (source_index {int(s[j])}, {int(exp.lengths[r])} tokens) is dropped "
                          f"by --overflow {exp.overflow} at --len {L}, but {shard} row {row0 + int(row[j])} document "
                          f"{int(k[j])} holds it")
        cmp.stray_count += max(0, dropped.size - MAX_EXAMPLES)
        for j in np.flatnonzero((rec >= 0) & (exp.num_pieces[np.maximum(rec, 0)] > 1)).tolist():
            pieces[j] = _match_part(cmp, int(rec[j]), ids, lab, int(start[j]), int(lens[j]), shard, row0 + int(row[j]),
                                    int(k[j]), int(col[j]), int(s[j]))
        use = np.flatnonzero(pieces >= 0)
        np.add.at(cmp.seen, pieces[use], 1)
        docs = _Doc(row[use], k[use], col[use], lens[use], s[use])
        _compare_docs(cmp, shard, row0, docs, pieces[use], ids, lab, start[use])
        row0 += R


def _match_part(cmp: _Compare, record: int, ids, lab, start: int, length: int, shard: str, row: int, k: int,
                col: int, src: int) -> int:
    """The part of split record `record` that this shard document is: the unused part with the same
    hash, else -1 (deferred: matched to a leftover part after the scan)."""
    exp = cmp.exp
    h = _hashes(ids[start:start + length], np.array([0, length]), exp.pack_len)[0]
    p0 = int(exp.first_piece[record])
    for i in np.flatnonzero(exp.part_hashes(record) == h).tolist():
        if cmp.seen[p0 + i] == 0 and exp.piece_len[p0 + i] == length:
            return p0 + i
    cmp.deferred.append((record, ids[start:start + length].copy(), lab[start:start + length].copy(), shard, row, k,
                         col, src))
    return -1


def _settle_deferred(cmp: _Compare) -> None:
    """Split parts that matched no part by hash (damaged ones): compared with a leftover part of
    their record, one of the same length first."""
    exp = cmp.exp
    for record, g_ids, g_lab, shard, row, k, col, src in cmp.deferred:
        p0, n = int(exp.first_piece[record]), int(exp.num_pieces[record])
        free = [p for p in range(p0, p0 + n) if cmp.seen[p] == 0]
        same = [p for p in free if exp.piece_len[p] == g_ids.size]
        if not free:
            cmp.stray_doc(f"{cmp.where(src)} (source_index {src}) is split into {n} parts, but {shard} row {row} "
                          f"document {k} is one more")
            continue
        p = (same or free)[0]
        cmp.seen[p] += 1
        docs = _Doc(np.zeros(1, np.int64), np.array([k]), np.array([col]), np.array([g_ids.size]), np.array([src]))
        _compare_docs(cmp, shard, row, docs, np.array([p]), g_ids, g_lab, np.zeros(1, np.int64))


def _missing(cmp: _Compare, wanted_records: np.ndarray | None) -> None:
    """Pieces no shard document matched (merged away, lost), and pieces matched twice."""
    exp = cmp.exp
    pieces = (np.arange(exp.piece_row.size) if wanted_records is None else
              np.concatenate([np.arange(exp.first_piece[r], exp.first_piece[r] + exp.num_pieces[r])
                              for r in wanted_records.tolist()] or [np.zeros(0, np.int64)]).astype(np.int64))
    lost = pieces[cmp.seen[pieces] == 0]
    twice = pieces[cmp.seen[pieces] > 1]
    cmp.where.resolve(exp.src[exp.piece_row[np.concatenate([lost[:MAX_EXAMPLES], twice[:MAX_EXAMPLES]])]])
    for p in lost[:MAX_EXAMPLES].tolist():
        r = int(exp.piece_row[p])
        cmp.stray_doc(f"{cmp.where(int(exp.src[r]))} (source_index {int(exp.src[r])}{_piece_note(exp, p)}, "
                      f"{int(exp.piece_len[p])} tokens) is in no row and not dropped: lost, or merged into another "
                      "document")
    for p in twice[:MAX_EXAMPLES].tolist():
        r = int(exp.piece_row[p])
        cmp.stray_doc(f"{cmp.where(int(exp.src[r]))} (source_index {int(exp.src[r])}{_piece_note(exp, p)}) is packed "
                      f"{int(cmp.seen[p])} times")
    cmp.stray_count += max(0, lost.size - MAX_EXAMPLES) + max(0, twice.size - MAX_EXAMPLES)


# ---------------------------------------------------------------------------------------------
# accounting: the manifest's lists against the records tokenized again


def _account_check(manifest: dict, tokenized, exp: _Expected, cmp: _Compare | None, where: _Provenance) -> Check:
    pieces = exp.pieces
    counts = manifest.get("counts") if isinstance(manifest.get("counts"), dict) else {}
    tokens = manifest.get("tokens") if isinstance(manifest.get("tokens"), dict) else {}
    problems = []
    have = {"examples_read": int(tokenized.num_read), "skipped": len(tokenized.skipped), "tokenized": len(exp.src),
            "truncated": int(pieces.truncated.size), "split": int(pieces.split.size),
            "split_parts": int(pieces.split_parts.sum()), "dropped": int(pieces.dropped.size)}
    for key, v in have.items():
        if key in counts and counts[key] != v:
            problems.append(f"counts.{key} is {counts[key]} in the manifest, {v} from the sources")
    t_have = {"in": int(exp.lengths.sum()), "loss_in": int(np.asarray(tokenized.loss_counts, np.int64).sum())}
    if cmp is not None:  # every piece compared: first-token loss is known exactly
        t_have["loss_first_token"] = cmp.first_token_loss
    for key, v in t_have.items():
        if key in tokens and tokens[key] != v:
            problems.append(f"tokens.{key} is {tokens[key]} in the manifest, {v} from the sources")

    def listed(key):
        v = manifest.get(key)
        return {int(x.get("source_index", -1)): x for x in v if isinstance(x, dict)} if isinstance(v, list) else None

    src, lengths = exp.src, exp.lengths
    rec_rows = {"dropped": pieces.dropped, "truncated": pieces.truncated, "split": pieces.split}
    for key, rows in rec_rows.items():
        lst = listed(key)
        if lst is None:
            continue
        now = {int(src[r]): int(lengths[r]) for r in rows.tolist()}
        extra, absent = sorted(set(lst) - set(now)), sorted(set(now) - set(lst))
        where.resolve(extra[:1] + absent[:1])
        if absent:
            i = absent[0]
            problems.append(f"{where(i)} (source_index {i}, {now[i]} tokens) is {key} at --len {exp.pack_len} "
                            f"(--overflow {exp.overflow}) but not listed under {key} in the manifest")
        if extra:
            i = extra[0]
            problems.append(f"source_index {i} is listed under {key} in the manifest, but "
                            + (f"{where(i)} has {int(lengths[exp.record_of(np.array([i]))[0]])} tokens when "
                               "tokenized again" if exp.record_of(np.array([i]))[0] >= 0 else "is no tokenized record"))
        for i in sorted(set(lst) & set(now)):
            if lst[i].get("length") != now[i]:
                problems.append(f"{where(i)} (source_index {i}) is listed under {key} with {lst[i].get('length')} "
                                f"tokens; tokenized again it has {now[i]}")
                break
    sk = manifest.get("skipped")
    if isinstance(sk, list):
        rec = sorted(int(x.get("source_index", -1)) for x in sk if isinstance(x, dict))
        now = sorted(int(s.source_index) for s in tokenized.skipped)
        if rec != now:
            problems.append(f"skipped records differ: the manifest lists source indices {rec[:5]}, the sources give "
                            f"{now[:5]}")
    ev = {k: v for k, v in have.items()}
    return Check(ACCOUNT, not problems, "; ".join(problems) or (
        f"{have['tokenized']} records tokenized again: counts, dropped, truncated, split and skipped agree with "
        "the manifest"), ev)


# ---------------------------------------------------------------------------------------------
# the entry point


def check_sources(pack: str, data: str | None = None, sample: int | None = None, seed: int = 0,
                  progress: bool = False) -> list[Check]:
    """The `verify --sources` checks of the pack folder `pack`: sources re-read from `data` (None:
    where the manifest says), tokenized again with the recorded tokenizer, template and options,
    and every document (or `sample` records, picked with `seed`) compared with the shards."""
    from packtool.verify.audit import list_shards, load_manifest

    checks: list[Check] = []
    manifest, merr = load_manifest(pack)
    try:
        if merr:
            raise _Stop(FILES, merr)
        cfg, missing = tokenize_config_from(manifest)
        note = f"; not recorded, defaults used: {', '.join(missing)}" if missing else ""
        read = cfg.read
        checks.append(Check(OPTIONS, True, f"{_options_text(cfg)}; cache off{note}",
                            {"options": dataclasses.asdict(cfg), "defaults": missing}))
        if "pack_len" not in manifest:
            raise _Stop(FILES, "the manifest records no pack_len")
        data = data if data is not None else _recorded_data(manifest, pack)
        files_check, _ = _files_check(data, manifest, read.split)
        checks.append(files_check)
        checks.append(_tokenizer_check(cfg, manifest))
        from packtool.tokenization.pipeline import load_tokenized

        t_tok = time.perf_counter()
        try:
            tokenized = load_tokenized(data, cfg, progress=progress)
        except PacktoolError as e:
            raise _Stop(TOKENS, f"tokenizing the sources again failed: {e}") from None
        t_tok = time.perf_counter() - t_tok
        checks.append(_template_check(cfg, manifest, tokenized))
        exp = _expected(tokenized, manifest)
        where = _Provenance(data, read)
        cmp = _Compare(exp, where, seen=np.zeros(exp.piece_row.size, np.int64))
        candidates = np.flatnonzero(exp.num_pieces > 0)
        wanted_records = None
        if sample is not None and sample < candidates.size:
            rng = np.random.default_rng(seed)
            wanted_records = np.sort(rng.choice(candidates, size=sample, replace=False))
        wanted = None if wanted_records is None else exp.src[wanted_records]
        t_cmp = time.perf_counter()
        shards = list_shards(pack)
        for shard in shards:
            try:
                _scan_shard(cmp, pack, shard, wanted)
            except _Stop:
                raise
            except Exception as e:  # unreadable shard: the integrity layer says why
                cmp.stray_doc(f"{shard}: not compared ({type(e).__name__}: {e})")
        _settle_deferred(cmp)
        _missing(cmp, wanted_records)
        t_cmp = time.perf_counter() - t_cmp
        checks.append(_account_check(manifest, tokenized, exp, cmp if wanted_records is None else None, where))
        n_rec = int(candidates.size if wanted_records is None else wanted_records.size)
        scope = (f"every one of the {n_rec} packed records" if wanted_records is None else
                 f"{n_rec} of {candidates.size} packed records (--sample {sample}, --seed {seed})")
        ev = {"records_compared": n_rec, "records_packed": int(candidates.size), "documents": cmp.docs_compared,
              "tokens_compared": cmp.tokens_compared, "documents_failed": cmp.failed_docs + cmp.stray_count,
              "first": cmp.examples + [{"message": m} for m in cmp.stray], "seconds_tokenize": round(t_tok, 3),
              "seconds_compare": round(t_cmp, 3), "sample": sample, "seed": seed}
        if wanted is not None:
            ev["sampled_source_index"] = wanted.tolist()
        problems = [e["message"] for e in cmp.examples] + cmp.stray
        n_bad = cmp.failed_docs + cmp.stray_count
        if problems:
            more = f" (+{n_bad - 1} more)" if n_bad > 1 else ""
            checks.append(Check(TOKENS, False, problems[0] + more, ev))
        else:
            checks.append(Check(TOKENS, True, f"{scope}: {cmp.docs_compared} documents, {cmp.tokens_compared:,} tokens "
                                f"of input_ids and labels equal the sources tokenized again ({t_tok:.1f} s tokenize, "
                                f"{t_cmp:.2f} s compare)", ev))
    except _Stop as stop:
        checks.append(stop.check)
        done = {c.name for c in checks}
        for name in ORDER:
            if name not in done:
                checks.append(Check(name, False, f"not run: {stop.check.name} failed", skipped=True))
    order = {n: i for i, n in enumerate(ORDER)}
    checks.sort(key=lambda c: order.get(c.name, len(ORDER)))
    return checks
