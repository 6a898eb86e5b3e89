"""The manifest's counts and lists against the records tokenized again
(packtool/verify/sources/pieces.py): re-signed numbers are caught where they disagree with the
data itself."""

from __future__ import annotations

from sources_pack import L, edit_manifest, manifest, verify  # noqa: E402

from packtool.verify.sources import load as vs


def test_untouched_counts_agree(built):
    code, checks = verify(built[1], "--sources")
    acc = checks[vs.ACCOUNT]
    m = manifest(built[1])
    assert code == 0 and acc["status"] == "pass"
    assert acc["message"] == (
        f"{m['counts']['tokenized']} records tokenized again: counts, dropped, truncated, "
        "split and skipped agree with the manifest"
    )
    assert (
        acc["evidence"]["split"] == m["counts"]["split"]
        and acc["evidence"]["split_parts"] == m["counts"]["split_parts"]
    )


def test_re_signed_counts_and_an_unlisted_split_record_are_named(pack):
    gone = manifest(pack)["split"][0]["source_index"]

    def resign(m):
        m["counts"]["tokenized"] += 1
        m["split"] = [s for s in m["split"] if s["source_index"] != gone]

    edit_manifest(pack, resign)
    code, checks = verify(pack, "--sources")
    assert code == 1
    msg = checks[vs.ACCOUNT]["message"]
    n = manifest(pack)["counts"]["tokenized"]
    assert f"counts.tokenized is {n} in the manifest, {n - 1} from the sources" in msg
    assert f":{gone + 1} (source_index {gone}, " in msg
    assert (
        f"tokens) is split at --len {L} (--overflow split) but not listed under split in the manifest"
        in msg
    )
    assert checks[vs.TOKENS]["status"] == "pass"  # the shards themselves are untouched
