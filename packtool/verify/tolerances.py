"""What counts as equal in verify's isolation checks, per dtype: the one table (constants only).

    comparison            float32   bfloat16               why
    packed vs alone       1e-4      BF16_LOGIT_TOL 0.125    same backend: only the reduction order differs
    vs fp32 reference     1e-4      BF16_REFERENCE_TOL 0.25 bf16 rounds weights and every activation
    swap A                0 (exact) BF16_SWAP_TOL 1e-3      same shapes and tiles: bit-exact expected
    causal probe          0         0                       masked scores contribute exactly 0
    loss sums             2e-4      0.05                    x sqrt(loss tokens + 1): errors add like a walk
    control               must miss every tolerance by CONTROL_MARGIN 2
    --model packed~alone  1e-4      2e-2 (MODEL_TOL)        relative: max |Δ| / max |logit|
    --model control       must differ by MODEL_POWER 10 x MODEL_TOL

Tolerances are max |difference| of logits (magnitude ~4-5 for the tiny models); verify --model's
are relative (forwards.py), so a model's logit scale does not move them.
benchmarks/gpu_check.sh (its probe step, measure_tolerances) prints the max |Δ| per model and
comparison beside them, to set the bf16 numbers from data.
"""

# bf16 keeps 8 mantissa bits: 1 ulp is 0.016-0.03 at |logit| 2-4. The bf16 numbers below are set
# above the largest differences measured on CPU (sdpa in bf16, 2-16 rows of 192-4096 tokens; the
# GPU kernels not yet).
#
# packed vs alone: fp32 <= 3.4e-6 (sdpa, 4096 tokens; the reference is bit-exact), bf16 <= 0.051
# -> 0.125; the negative control moves logits by 4.5-5.5.
BF16_LOGIT_TOL = 0.125
LOGIT_TOL = {"float32": 1e-4, "bfloat16": BF16_LOGIT_TOL}
# vs the fp32 reference: bf16 <= 0.054 (192 tokens), 0.068 (1024), 0.119 (4096; Llama) -> 0.25; a
# non-causal kernel is off by 3.4 (GPT-2) to 6.6.
BF16_REFERENCE_TOL = 0.25
REFERENCE_TOL = {"float32": 1e-4, "bfloat16": BF16_REFERENCE_TOL}
# swap A: the swapped run takes the packed run's tiles and reduction order, so bit-exact is expected
# (measured exact on CPU in bf16); 1e-3 is below one bf16 step of any |logit| > 0.25, so a leak of a
# single rounding step still fails while last-bit noise in near-zero logits does not.
BF16_SWAP_TOL = 1e-3
SWAP_TOL = {"float32": 0.0, "bfloat16": BF16_SWAP_TOL}
CAUSAL_TOL = 0.0
# a label left on a document's first token adds a whole cross-entropy term (~log(vocab) = 6.9), far
# above the measured bf16 noise (<= 0.35 per document)
LOSS_TOL = {"float32": 2e-4, "bfloat16": 0.05}
CONTROL_MARGIN = 2.0
# verify --model (model_check.py): bf16 where the FlashAttention implementation runs
MODEL_TOL = {"float32": 1e-4, "bfloat16": 2e-2}
MODEL_POWER = 10
