"""The manifest's recorded options -> TokenizeConfig (packtool/verify/sources/load.py): every
option pack used is recorded, an unknown one is refused, a missing one takes its default."""

from __future__ import annotations

from sources_pack import edit_manifest, failed, manifest, verify  # noqa: E402

from packtool.verify.sources import load as vs


def test_manifest_records_every_tokenize_option(built):
    data, pack = built
    opts = manifest(pack)["options"]
    assert opts["input"] == str(data)
    assert (
        opts["train_on"] == "assistant"
        and opts["chat_template"] is None
        and opts["tokenizer"] is None
    )
    assert opts["read"] == {
        **opts["read"],
        "format": None,
        "split": "train",
        "columns": [],
        "roles": [],
        "on_error": "error",
        "limit": None,
    }
    cfg, missing = vs.tokenize_config_from(manifest(pack))
    assert missing == [] and cfg.cache is False and cfg.read.columns == ()


def test_recorded_lists_become_the_config_s_tuples():
    """JSON lists (columns, roles: pairs) come back as the tuples a frozen config holds; cache and
    num_proc are never taken from the manifest."""
    m = {
        "options": {
            "read": {"columns": [["messages", "dialog"]], "roles": [["bot", "assistant"]]},
            "train_on": "last",
            "cache": True,
            "num_proc": 7,
            "input": "x.jsonl",
        }
    }
    cfg, missing = vs.tokenize_config_from(m)
    assert cfg.read.columns == (("messages", "dialog"),) and cfg.read.roles == (
        ("bot", "assistant"),
    )
    assert cfg.train_on == "last" and cfg.cache is False and cfg.num_proc is None
    assert (
        "options.cache" not in missing and "options.tokenizer" not in missing
    )  # from manifest["tokenizer"]
    assert vs.options_text(cfg).startswith(
        "tokenize options rebuilt from the manifest: train_on 'last'"
    )


def test_unknown_recorded_option_is_refused(pack):
    edit_manifest(pack, lambda m: m["options"]["read"].update(shuffle_lines=True))
    code, checks = verify(pack, "--sources")
    assert code == 1
    assert checks[vs.OPTIONS]["message"].startswith(
        "manifest options.read.shuffle_lines = True is unknown to packtool "
    )
    assert checks[vs.TOKENS]["status"] == "skip"


def test_options_missing_from_an_older_manifest_take_defaults(pack):
    edit_manifest(
        pack, lambda m: m.update(options={"train_on": "assistant", "chat_template": None})
    )
    code, checks = verify(pack, "--sources")
    assert code == 0, [c["message"] for c in failed(checks).values()]
    msg = checks[vs.OPTIONS]["message"]
    assert (
        "not recorded, defaults used: " in msg
        and "options.read" in msg
        and "options.tokenizer_backend" in msg
    )
