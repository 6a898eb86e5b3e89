"""A pack as NeMo / Megatron-Bridge packed SFT files (their `GPTSFTPackedDataset` .npy format).

    OUT/training_{L}.npy       numpy object array (np.save, allow_pickle), one dict per row:
                                 input_ids     int32 [n_1 + ... + n_k]  the documents back to back,
                                                                        no pad tail, no pad slots
                                 loss_mask     bool  [same]             [j]: token j+1 is a target
                                                                        of the same document
                                 seq_start_id  list[int]                each document's first index,
                                                                        from 0, without the end
    OUT/{L}_metadata.jsonl     a JSON list holding one dict: dataset_max_seqlen, max_samples_per_bin,
                                 min_packed_seqlen, pack_size, packing_factor, packing_efficiency
    OUT/export.json            packtool's record (source pack, counts, files), see publish.py

One row, pack_len 9:

    packtool  input_ids   a0   a1   a2   a3 | b0   b1   b2 | pad pad     seq_lengths [4, 3]
              labels     -100  a1  -100  a3 |-100  b1   b2 |-100 -100
    NeMo      input_ids   a0   a1   a2   a3   b0   b1   b2              seq_start_id [0, 4]
              loss_mask   1    0    1    0    1    1    0               0 at each document's end

How the readers consume it (Megatron-Bridge 067f987d, src/megatron/bridge/data/packing/gpt_sft.py;
NeMo 8cfedd72, nemo/collections/llm/gpt/data/core.py and .../nlp/.../gpt_sft_dataset.py, the same
collate): boundaries = seq_start_id + [len(input_ids)]; a document [s, e) gives tokens ids[s:e-1],
labels ids[s+1:e], loss_mask[s:e-1] (with answer_only_loss, their default), positions
range(e-s-1), and e-s-1 to cu_seqlens. So a document of n tokens trains its n-1 next-token
predictions, which are exactly packtool's labels[1:n] (labels[0] is -100 in every pack): total
tokens are manifest tokens.out and the sum of loss_mask is tokens.loss_out, checked at the end.
The metadata keys are those their prepare step writes (dataset_max_seqlen and min_packed_seqlen
count the e-s-1 lengths); pad_cu_seqlens reads max_samples_per_bin, dataset_max_seqlen and
min_packed_seqlen from it.

Memory: the .npy format is one pickled object array, so the whole export is in memory before it is
written (~5 bytes per token, as numpy arrays); `save_object_npy` streams it without a second copy.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from packtool import schema
from packtool.export.publish import RECORD, RECORD_KEY, ExportResult, check_export_target
from packtool.export.reader import DocBatch, PackReader
from packtool.io.shards import atomic_output, check_space, naming
from packtool.schema.manifest import LEFTOVER, Notice

FORMAT = "nemo"
READERS = {  # the reader code this layout was checked against (see the module docstring)
    "megatron-bridge": "NVIDIA-NeMo/Megatron-Bridge@067f987df03b8355b03192d88d70f1709fedf51a",
    "nemo": "NVIDIA/NeMo@8cfedd7203462cb251a914e700e5605444277561",
}
BYTES_PER_TOKEN = 5  # int32 input_ids + bool loss_mask in memory and on disk
BYTES_PER_ROW = 700  # dict, two array headers, the seq_start_id list, pickle framing
REPEATED_EOS = "nemo_repeated_eos"


def file_names(pack_len: int) -> dict[str, str]:
    """The names NeMo 2 / Megatron-Bridge give these files under their default pack folder."""
    return {"data": f"training_{pack_len}.npy", "metadata": f"{pack_len}_metadata.jsonl"}


class _Rows:
    """NeMo rows and the metadata's running statistics, fed DocBatch by DocBatch."""

    def __init__(self, eos_id: int | None):
        self.rows: list[dict] = []
        self.eos_id = eos_id
        self.max_doc = 0  # longest e-s-1 of a document
        self.max_docs = 0
        self.min_row = None  # shortest sum of e-s-1 over a row's documents
        self.repeated_eos = 0

    def add(self, b: DocBatch) -> None:
        if not b.doc_len.size:
            return
        ends = np.cumsum(b.doc_len)
        starts = ends - b.doc_len
        mask = np.zeros(b.tokens.size, dtype=bool)
        mask[:-1] = b.labels[1:] != schema.IGNORE_INDEX
        mask[ends - 1] = False  # a document's last token predicts nothing of its own
        if self.eos_id is not None:
            eos = b.tokens == self.eos_id
            eos[ends - 1] = False
            self.repeated_eos += int((np.add.reduceat(eos.astype(np.int32), starts) >= 2).sum())
        row_ends = np.cumsum(b.row_docs)
        doc0 = row_ends - b.row_docs
        tok_end = np.concatenate(([0], ends))
        for r in np.flatnonzero(b.row_docs):
            d0, d1 = int(doc0[r]), int(row_ends[r])
            a, z = int(tok_end[d0]), int(tok_end[d1])
            self.rows.append(
                {
                    "input_ids": b.tokens[a:z],
                    "loss_mask": mask[a:z],
                    "seq_start_id": (starts[d0:d1] - a).tolist(),
                }
            )
            train = z - a - (d1 - d0)
            self.min_row = train if self.min_row is None else min(self.min_row, train)
        self.max_doc = max(self.max_doc, int(b.doc_len.max()) - 1)
        self.max_docs = max(self.max_docs, int(b.row_docs.max()))

    def metadata(self, pack_len: int, totals) -> dict:
        """The metadata file's one dict; `totals`: the reader's (documents, tokens) of these rows."""
        n, train_tokens = len(self.rows), totals.tokens - totals.documents
        return {
            "dataset_max_seqlen": self.max_doc,
            "max_samples_per_bin": self.max_docs,
            "packing_factor": round(totals.documents / n, 2) if n else 0.0,
            "packing_efficiency": round(train_tokens / n / pack_len * 100, 2) if n else 0.0,
            "pack_size": pack_len,
            "min_packed_seqlen": self.min_row or 0,
        }

    def array(self) -> np.ndarray:
        arr = np.empty(len(self.rows), dtype=object)
        arr[:] = self.rows
        return arr


def save_object_npy(path: Path, arr: np.ndarray) -> None:
    """np.save of an object array, without np.save's second copy of the data: its pickler memoizes
    the bytes each element array pickles to, holding them all until the end (a peak of twice the
    export). A pickler in fast mode (no memo; the rows are a tree, nothing is shared) streams
    protocol-4 frames to the file instead. np.load(path, allow_pickle=True) reads it as any .npy."""
    import pickle

    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(arr))
        pickler = pickle.Pickler(f, protocol=4)
        pickler.fast = True
        pickler.dump(arr)


def export_nemo(pack: str, out: str, force: bool = False, progress=None) -> ExportResult:
    """Write `pack` as NeMo / Megatron-Bridge packed SFT files into the folder `out` (see the module
    docstring). `progress(rows read, rows total)`."""
    t0 = time.perf_counter()
    out_path = Path(out)
    with PackReader(pack) as reader:
        m = reader.manifest
        check_export_target(out_path, force)
        check_space(out_path, BYTES_PER_TOKEN * m.tokens.out + BYTES_PER_ROW * m.counts.rows)
        names = file_names(m.pack_len)
        rows = _Rows(m.tokenizer.get("eos_id") if isinstance(m.tokenizer, dict) else None)
        leftover: list[str] = []
        # a temporary folder beside OUT, renamed to OUT at the end (publish.py)
        with atomic_output(out_path, force, check=check_export_target, said=leftover) as tmp:
            for b in reader.batches():
                rows.add(b)
                if progress is not None:
                    progress(reader.totals.rows, m.counts.rows)
            totals = reader.finish()
            t_read = time.perf_counter()
            arr = rows.array()
            with naming(tmp / names["data"]):
                save_object_npy(tmp / names["data"], arr)
            del arr
            meta = rows.metadata(m.pack_len, totals)
            record = _record(pack, reader, totals, meta, names)
            texts = {names["metadata"]: json.dumps([meta]), RECORD: json.dumps(record, indent=2)}
            for name, text in texts.items():
                with naming(tmp / name):
                    (tmp / name).write_text(text + "\n", encoding="utf-8")
            sizes = {k: os.path.getsize(tmp / v) for k, v in names.items()}
    warnings = [Notice(LEFTOVER, line) for line in leftover]
    if rows.repeated_eos:
        warnings.append(
            Notice(
                REPEATED_EOS,
                f"{rows.repeated_eos:,} document(s) hold eos (id {rows.eos_id}) twice or more "
                "before their last token: NeMo 1.x (megatron_gpt_model, cu_seqlens_unpadded) "
                "would end their attention at the second eos; train them with NeMo 2 or "
                "Megatron-Bridge, which read them whole",
                rows.repeated_eos,
            )
        )
    t1 = time.perf_counter()
    return ExportResult(
        format=FORMAT,
        pack=pack,
        out=str(out_path),
        files={k: str(out_path / v) for k, v in {**names, "record": RECORD}.items()},
        bytes=sizes,
        record=record,
        warnings=warnings,
        seconds={"read": round(t_read - t0, 3), "write": round(t1 - t_read, 3)},
    )


def _record(pack: str, reader: PackReader, totals, meta: dict, names: dict) -> dict:
    """export.json: deterministic (no times), enough to tell what was exported and how to load it."""
    from packtool import __version__
    from packtool.io.files import sha256_file

    m = reader.manifest
    return {
        RECORD_KEY: FORMAT,
        "packtool_version": __version__,
        "pack": pack,
        "pack_manifest_sha256": sha256_file(os.path.join(reader.path, schema.MANIFEST)),
        "pack_len": m.pack_len,
        "files": names,
        "rows": totals.rows - totals.rows_without_docs,  # the pack's rows with a document
        "rows_without_documents": totals.rows_without_docs,
        "documents": totals.documents,
        "empty_documents_skipped": totals.empty_docs,
        "tokens": totals.tokens,
        "loss_tokens": totals.loss_tokens,
        "train_tokens": totals.tokens - totals.documents,
        "pad_slots_dropped": totals.pad_slots,
        "padded_documents": reader.padded,
        "pack_layout": {  # as the manifest records it (absent keys: the default layout)
            "pad_to_multiple": reader.raw.get("pad_to_multiple", 1),
            "fixed_docs": reader.raw.get("fixed_docs", False),
        },
        "padding": (
            "documents exported with their real tokens only (seq_lengths_unpadded); pad at load "
            "time, not here"
            if reader.padded
            else "none stored: each row holds its documents' tokens and no pad tail"
        ),
        "metadata": meta,
        "numpy_version": np.__version__,
        "readers": READERS,
        "settings": {  # what the reader must be given for this layout
            "packed_sequence_size": m.pack_len,
            "pad_seq_to_mult": 1,
            "answer_only_loss": True,
        },
    }
