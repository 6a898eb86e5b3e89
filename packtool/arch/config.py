"""MODEL -> its config.json as a dict: a local folder, or a hub id already in the local cache.

    MODEL                      read
    ./Qwen3.5-0.8B/            ./Qwen3.5-0.8B/config.json
    Qwen/Qwen3.5-0.8B          the hub cache's snapshot of it (no network), or with
                               allow_download=True that one file from the hub
    ./config.json              itself

Only config.json is read, never weights. Errors are one line naming MODEL and the fix.
"""

from __future__ import annotations

import json
import os

from packtool.errors import PacktoolError, UsageError

CONFIG = "config.json"


def _from_hub(model: str, allow_download: bool) -> str | None:
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    cached = try_to_load_from_cache(model, CONFIG)
    if isinstance(cached, str):
        return cached
    if not allow_download:
        return None
    try:
        return hf_hub_download(model, CONFIG)
    except Exception as e:  # offline, unknown repo, gated: one line
        raise PacktoolError(
            f"--model {model}: cannot download {CONFIG}: {type(e).__name__}: {e}"
        ) from e


def config_path(model: str, allow_download: bool = False) -> str:
    p = os.path.expanduser(model)
    if os.path.isfile(p):
        return p
    if os.path.isdir(p):
        path = os.path.join(p, CONFIG)
        if not os.path.isfile(path):
            raise UsageError(
                f"--model {model}: the folder has no {CONFIG}; give the model's folder (the one "
                "with config.json) or a hub id"
            )
        return path
    if (
        model.count("/") == 1
        and not model.startswith((".", "/", "~"))
        and not model.endswith(".json")
    ):
        path = _from_hub(model, allow_download)
        if path:
            return path
        raise UsageError(
            f"--model {model}: no such file or folder, and {CONFIG} of the hub id {model!r} is not in "
            "the local cache; add --allow-download (fetches config.json only) or pass the folder"
        )
    raise UsageError(
        f"--model {model}: no such file or folder; give a model folder, its config.json or a hub id"
    )


def read_config(model: str, allow_download: bool = False) -> tuple[dict, str]:
    """(config.json as a dict, the path it was read from)."""
    path = config_path(model, allow_download)
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise PacktoolError(f"--model {model}: cannot read {path}: {e}") from e
    if not isinstance(cfg, dict) or "model_type" not in cfg:
        raise PacktoolError(
            f"--model {model}: {path} has no 'model_type'; it is not a transformers model config"
        )
    return cfg, path


def folder_config(folder: str | None) -> dict | None:
    """The config.json of a tokenizer folder that is a whole model folder, or None (no error)."""
    if not folder or not os.path.isdir(os.path.expanduser(folder)):
        return None
    return _json_or_none(os.path.join(os.path.expanduser(folder), CONFIG))


def _json_or_none(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) and "model_type" in cfg else None


def model_warning(model: str | None, tokenizer: str | None) -> str | None:
    """inspect/profile/pack's one-line early warning (packtool.arch.warning) for --model, or for a
    --tokenizer folder that holds the model's config.json; None when there is nothing to say."""
    from packtool import arch

    if model:
        path = config_path(model)
        cfg = _json_or_none(path)  # a config without model_type: nothing to warn about
        return arch.warning(cfg, path) if cfg else None
    cfg = folder_config(tokenizer)
    return arch.warning(cfg, f"{tokenizer}/config.json") if cfg else None
