"""Greedy decoding on the GPU against Hugging Face transformers, token by token.

luminal generates --tokens greedy ids on the GPU (`luminal generate --device cuda
--print-ids`) from a random model of a real shape (bench/random_models.py); transformers
then reads the prompt and those ids in one forward pass on the same GPU (teacher forcing)
and each step's luminal token must be transformers' argmax there, or a near-tie:
transformers' margin between its argmax and luminal's token within --tie of the step's
logit spread (max - min; against bf16, plus the bf16 logits' own error on that margin,
their difference from f32's). Forced along luminal's tokens, transformers sees the same
sequence after a near-tie too, so every step is compared (a random model of a large
vocabulary has near-ties from its first steps: its top logits are a few thousandths of
their spread apart). Any other difference fails. Run against transformers in the weights'
bf16 (what a bf16 model computes) and in f32 (what luminal, f32 activations over the bf16
weights, approximates more closely).

    python3 bench/gpu_greedy_parity.py --luminal build/tools/luminal [--shape llama-3.2-1b]
        [--tokens 64] [--prompt 32] [--work DIR] [--luminal-args "--tp 2"]

Exit 0 when every step agrees or is a near-tie, against both, 1 otherwise.
"""
import argparse
import os
import subprocess
import sys

import torch

import random_models


def luminal_ids(binary, model, prompt_text, tokens, extra=()):
    out = subprocess.run([binary, "generate", "--model", model, "--device", "cuda", "--prompt",
                          prompt_text, "--max-tokens", str(tokens), "--print-ids", *extra],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"luminal failed ({out.returncode}):\n{out.stderr}")
    lines = out.stdout.strip().splitlines()
    return [list(map(int, line.split())) for line in lines[-2:]]


def compare(logits, prompt_len, generated, tie, exact=None):
    """(steps agreed, near-ties, the first difference or None) for luminal's `generated`
    against the forced `logits`. With `exact` (f32 logits beside bf16 ones), a margin may
    also be as large as the bf16 logits' own error on it (their margin less f32's)."""
    agreed, ties = 0, 0
    for i, token in enumerate(generated):
        at = prompt_len - 1 + i
        row = logits[at].float()
        best = int(torch.argmax(row))
        if best == token:
            agreed += 1
            continue
        margin = float(row[best] - row[token])
        spread = float(row.max() - row.min())
        own_error = 0.0
        if exact is not None:
            own_error = abs(margin - float(exact[at][best] - exact[at][token]))
        if margin > tie * spread + own_error:
            return agreed, ties, (f"step {i}: luminal {token}, transformers {best}, margin "
                                  f"{margin:.4f} of a spread {spread:.2f}")
        ties += 1
    return agreed, ties, None


def forced_logits(model, dtype, ids):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(model, dtype=dtype).cuda().eval()
    with torch.no_grad():
        logits = m(ids).logits[0].float().cpu()
    del m
    torch.cuda.empty_cache()
    return logits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--luminal", required=True)
    ap.add_argument("--shape", default="llama-3.2-1b")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens")
    ap.add_argument("--tie", type=float, default=0.01,
                    help="a near-tie's margin, as a fraction of the step's logit spread")
    ap.add_argument("--work", default="models/gpu_bench")
    ap.add_argument("--luminal-args", default="", help="more options for luminal generate")
    a = ap.parse_args()
    model = os.path.join(a.work, a.shape)
    if not os.path.exists(os.path.join(model, "tokenizer.json")):
        random_models.write_hf_folder(model, a.shape)
    prompt_ids, generated = luminal_ids(a.luminal, model, random_models.prompt_text(a.prompt),
                                        a.tokens, a.luminal_args.split())
    want_prompt = random_models.prompt_ids(a.prompt)
    ok = prompt_ids == want_prompt
    print(f"prompt ids: {'as transformers encodes them' if ok else 'DIFFER'} ({len(prompt_ids)})")
    ids = torch.tensor([want_prompt + generated], device="cuda")
    exact = forced_logits(model, torch.float32, ids)
    for name, logits, beside in [("float32", exact, None),
                                 ("bfloat16", forced_logits(model, torch.bfloat16, ids), exact)]:
        agreed, ties, differs = compare(logits, len(want_prompt), generated, a.tie, beside)
        print(f"transformers {name}: {agreed} of {len(generated)} tokens its argmax, {ties} "
              "near-ties" + (f"; DIFFERS at {differs}" if differs else ""))
        ok = ok and not differs
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
