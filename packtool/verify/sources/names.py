"""The `verify --sources` checks' names, in report order, and the failure that ends the run early.

    OPTIONS    "sources options"        manifest options -> TokenizeConfig    options.tokenize_config_from
    FILES      "sources sha256"         the files now against manifest        load.files_check
    TOKENIZER  "sources tokenizer"      tokenizer files hash                   load.tokenizer_check
    TEMPLATE   "sources chat template"  chat template hash                     load.template_check
    ACCOUNT    "sources accounting"     counts, dropped, truncated, split      accounting.account_check
    TOKENS     "sources tokens"         every document against its piece       match, compare

Tests, the report and `--json` readers match these names.

    Stop(name, message) ──raised by any stage──▶ check_sources: Check(name, failed, message), then
                                                 "not run: NAME failed" (skipped) for the rest of ORDER
"""

from __future__ import annotations

from packtool.verify import Check

OPTIONS = "sources options"
FILES = "sources sha256"
TOKENIZER = "sources tokenizer"
TEMPLATE = "sources chat template"
ACCOUNT = "sources accounting"
TOKENS = "sources tokens"
ORDER = (OPTIONS, FILES, TOKENIZER, TEMPLATE, ACCOUNT, TOKENS)


class Stop(Exception):
    """A check failed in a way that leaves nothing to compare: the remaining checks are skipped."""

    def __init__(self, name: str, message: str, evidence: dict | None = None):
        super().__init__(message)
        self.check = Check(name, False, message, evidence or {})
