#!/usr/bin/env python3
"""Reference data for rope scaling (YaRN, linear) from Hugging Face transformers.

Run from the repository root:  python3 testdata/rope/gen_rope_refs.py OUTDIR
It writes into OUTDIR (then copied into testdata/rope/):

  inv_freq.json        for a list of rope configs: the inverse frequencies and the
                       attention factor that transformers' rotary embedding holds
                       (Qwen3RotaryEmbedding / Qwen3NextRotaryEmbedding), plus the
                       transformers/torch versions and the source of its YaRN function.
  NAME/config.json     testdata/hf/<base>/config.json with the rope scaling changed
  NAME/ref.json        input_ids (96 positions), logits_shape, greedy_prompt/out
  NAME/ref_logits.f32  float32 little-endian logits [96, vocab], one forward pass

Models are the tiny fixtures of testdata/hf (bf16 safetensors) loaded in float32 (the
bf16 values upcast, nothing cast back), run on the CPU in float32.
"""
import inspect
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

torch.manual_seed(0)
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
base_ids = json.load(open("testdata/hf/qwen3/ref.json"))["input_ids"]
rng = np.random.default_rng(1234)
input_ids = list(base_ids) + [int(x) for x in rng.integers(0, 1024, 96 - len(base_ids))]
greedy_prompt = input_ids[:40]

# Logit fixtures: (name, base fixture, rope_parameters merged into the base's).
# max_position_embeddings is set to factor * original so that the factor is the same
# whether transformers takes it from "factor" or from the ratio of the two.
# qwen3_5_yarn: the Qwen3.5/3.6 model cards' form (mrope fields kept next to yarn; head_dim 32 ×
# partial 0.25 = 8 rotary dims, so mrope_section sums to 4). qwen2_yarn_legacy: the transformers
# 4.x spelling of the Qwen2.5 model cards (top-level rope_theta, "rope_scaling" with "type"),
# which transformers 5 standardises itself.
models = [
    ("qwen3_yarn", "qwen3", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}, 128),
    ("qwen3_linear", "qwen3", {"rope_type": "linear", "factor": 4.0}, 4096),
    ("qwen3_next_yarn", "qwen3_next", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}, 128),
    ("qwen3_5_yarn", "qwen3_5", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                                 "mrope_interleaved": True, "mrope_section": [2, 1, 1]}, 128),
    ("qwen2_yarn_legacy", "qwen2", {"legacy": True, "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}, 128),
]

# Pure inverse-frequency cases: (name, head_dim, partial, theta, max_pos, params).
freq_cases = [
    ("yarn_qwen3_card", 128, 1.0, 1000000.0, 131072, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}),
    ("yarn_qwen3_card_maxpos40960", 128, 1.0, 1000000.0, 40960, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}),
    ("yarn_no_original", 128, 1.0, 1000000.0, 32768, {"rope_type": "yarn", "factor": 4.0}),
    ("yarn_betas", 64, 1.0, 10000.0, 4096, {"rope_type": "yarn", "factor": 8.0, "beta_fast": 16, "beta_slow": 2}),
    ("yarn_no_truncate", 64, 1.0, 10000.0, 4096, {"rope_type": "yarn", "factor": 8.0, "truncate": False}),
    ("yarn_mscale", 64, 1.0, 10000.0, 4096, {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.707}),
    ("yarn_attention_factor", 64, 1.0, 10000.0, 4096, {"rope_type": "yarn", "factor": 2.0, "attention_factor": 0.9}),
    ("yarn_partial", 256, 0.25, 10000000.0, 262144, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 65536}),
    ("yarn_tiny", 32, 1.0, 1000000.0, 128, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}),
    ("yarn_tiny_partial", 32, 0.25, 10000.0, 128, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}),
    ("linear", 128, 1.0, 1000000.0, 40960, {"rope_type": "linear", "factor": 4.0}),
    ("default", 128, 1.0, 1000000.0, 40960, {"rope_type": "default"}),
]


def rotary_of(model_type, cfg):
    if model_type == "qwen3_next":
        from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextRotaryEmbedding as R
    else:
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding as R
    return R(config=cfg)


def make_config(base, params, max_pos, head_dim=None, partial=None, theta=None):
    d = json.load(open(os.path.join("testdata/hf", base, "config.json")))
    if params.get("legacy"):
        rp = d.pop("rope_parameters")
        d["rope_theta"] = rp["rope_theta"]
        d["rope_scaling"] = {k: v for k, v in params.items() if k != "legacy"}
        d["max_position_embeddings"] = max_pos
        return d
    rp = dict(d.get("rope_parameters") or {})
    if theta is not None:
        rp["rope_theta"] = theta
    if partial is not None:
        rp["partial_rotary_factor"] = partial
        d["partial_rotary_factor"] = partial
    rp.update(params)
    d["rope_parameters"] = rp
    d["max_position_embeddings"] = max_pos
    if head_dim is not None:
        d["head_dim"] = head_dim
    return d


def config_obj(d):
    tmp = tempfile.mkdtemp()
    json.dump(d, open(os.path.join(tmp, "config.json"), "w"))
    return AutoConfig.from_pretrained(tmp), tmp


report = {"transformers": transformers.__version__, "torch": torch.__version__, "cases": []}
try:
    from transformers import modeling_rope_utils as mru
    report["yarn_source"] = inspect.getsource(mru._compute_yarn_parameters)
    report["linear_source"] = inspect.getsource(mru._compute_linear_scaling_rope_parameters)
except Exception as e:  # noqa: BLE001
    report["source_error"] = repr(e)

for name, hd, partial, theta, max_pos, params in freq_cases:
    try:
        d = make_config("qwen3", params, max_pos, head_dim=hd, partial=partial, theta=theta)
        cfg, _ = config_obj(d)
        r = rotary_of("qwen3", cfg)
        report["cases"].append({
            "name": name, "head_dim": hd, "partial_rotary_factor": partial, "rope_theta": theta,
            "max_position_embeddings": max_pos, "params": params,
            "inv_freq": [float(x) for x in r.inv_freq.float().tolist()],
            "attention_factor": float(r.attention_scaling),
            "config_rope_parameters": {k: v for k, v in (getattr(cfg, "rope_parameters", None) or {}).items()},
        })
    except Exception as e:  # noqa: BLE001
        report["cases"].append({"name": name, "error": repr(e)})
        print("case", name, "failed:", repr(e))

for name, base, params, max_pos in models:
    try:
        d = make_config(base, params, max_pos)
        dst = os.path.join(out, name)
        os.makedirs(dst, exist_ok=True)
        tmp = tempfile.mkdtemp()
        json.dump(d, open(os.path.join(tmp, "config.json"), "w"), indent=2)
        shutil.copy(os.path.join("testdata/hf", base, "model.safetensors"), tmp)
        shutil.copy(os.path.join("testdata/hf", base, "generation_config.json"), tmp)
        try:
            model = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32)
        except TypeError:
            model = AutoModelForCausalLM.from_pretrained(tmp, torch_dtype=torch.float32)
        model.eval()
        rot = model.model.rotary_emb
        with torch.no_grad():
            logits = model(torch.tensor([input_ids])).logits[0].float().numpy()
            gen = model.generate(torch.tensor([greedy_prompt]), max_new_tokens=24, do_sample=False,
                                 attention_mask=torch.ones(1, len(greedy_prompt), dtype=torch.long))
        greedy_out = gen[0, len(greedy_prompt):].tolist()
        logits.astype("<f4").tofile(os.path.join(dst, "ref_logits.f32"))
        json.dump(d, open(os.path.join(dst, "config.json"), "w"), indent=2)
        json.dump({
            "model_type": d["model_type"], "base": "testdata/hf/" + base, "input_ids": input_ids,
            "logits_shape": list(logits.shape), "greedy_prompt": greedy_prompt, "greedy_out": greedy_out,
            "inv_freq": [float(x) for x in rot.inv_freq.float().tolist()],
            "attention_factor": float(rot.attention_scaling),
            "transformers": transformers.__version__, "torch": torch.__version__,
        }, open(os.path.join(dst, "ref.json"), "w"))
        print(name, "ok", logits.shape, "attention_factor", float(rot.attention_scaling))
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        print("model", name, "failed:", repr(e))

json.dump(report, open(os.path.join(out, "inv_freq.json"), "w"), indent=1)
print("transformers", transformers.__version__, "torch", torch.__version__)
