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

from packtool import arch
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


def read_config(
    model: str, allow_download: bool = False, *, need_type: bool = True
) -> tuple[dict, str]:
    """(config.json as a dict, the path it was read from): the one reader of --model for every
    command. `need_type`: one without model_type is an error (profile reads a FLOPs-only config's
    sizes without it)."""
    path = config_path(model, allow_download)
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except ValueError as e:
        raise PacktoolError(
            f"--model {model}: {path} is not JSON ({e}); give the model's config.json "
            "(the file transformers' save_pretrained writes) or its folder"
        ) from None
    except OSError as e:
        raise PacktoolError(f"--model {model}: cannot read {path}: {e}") from None
    if not isinstance(cfg, dict) or (need_type and "model_type" not in cfg):
        raise PacktoolError(
            f"--model {model}: {path} has no 'model_type'; it is not a transformers model config: "
            "give the model's config.json or its folder"
        )
    return cfg, path


def concern(cfg: dict, where: str) -> str | None:
    """Why packtool cannot tell whether this config's model keeps packed documents apart, in one
    line, or None: inspect/profile/pack warn with it, verify --model ends "not checked" with it."""
    mt = cfg.get("model_type")
    auto_map = cfg.get("auto_map")
    if auto_map:
        names = ", ".join(sorted(auto_map)) if isinstance(auto_map, dict) else str(auto_map)
        return (
            f"{where} names its own Python code (auto_map: {names}); packtool does not run a "
            "model's own code, so its layers cannot be checked: verify a pack with a config "
            "transformers ships (model_type) or check isolation in your own training code"
        )
    try:
        from transformers import __version__ as version
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError:  # no transformers here: nothing to compare with
        return None
    if mt not in CONFIG_MAPPING_NAMES:
        return (
            f"{where}: model_type {mt!r} is not known to transformers {version}; packtool cannot "
            "tell which layers it has: upgrade transformers if the model is new"
        )
    text = cfg.get("text_config")
    types = {mt} | ({text.get("model_type")} if isinstance(text, dict) else set())
    if not types & set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        return (
            f"{where}: model_type {mt!r} is not a causal LM in transformers {version} (no "
            "AutoModelForCausalLM class): packed causal training does not apply to it"
        )
    return None  # an encoder with an LM head (bert): verify --model measures it is not causal


def folder_config(folder: str | None) -> dict | None:
    """The config.json of a tokenizer folder that is a whole model folder, or None (no error)."""
    if not folder or not os.path.isdir(os.path.expanduser(folder)):
        return None
    try:
        return read_config(folder)[0]
    except PacktoolError:  # no config.json, not JSON, no model_type
        return None


def model_warning(model: str | None, tokenizer: str | None) -> str | None:
    """inspect/profile/pack's one-line early warning for --model, or for a --tokenizer folder that
    holds the model's config.json: `concern`, else packtool.arch.warning; None: nothing to say."""
    if model:
        cfg, path = read_config(model, need_type=False)
        if "model_type" not in cfg:  # a FLOPs-only config (profile's sizes): nothing to judge
            return None
    else:
        cfg, path = folder_config(tokenizer), f"{tokenizer}/config.json"
        if not cfg:
            return None
    return concern(cfg, path) or arch.warning(cfg, path)
