# Makes testdata/embeddings: reference embeddings of testdata/hf/qwen3 loaded
# as a Qwen3Model (AutoModel), and the same weights saved in the prefix-less
# Qwen3Model layout that Qwen/Qwen3-Embedding-* checkpoints use.
# Pooling as Qwen3-Embedding: hidden state of the last token after the final
# norm (last_hidden_state[:, -1]), L2-normalised. Run: python make_ref.py OUTDIR
import json, os, sys
import torch, transformers
from transformers import AutoModel
from safetensors import safe_open

out = sys.argv[1]
src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hf", "qwen3")
model = AutoModel.from_pretrained(src, dtype=torch.float32)
model.eval()
print(type(model).__name__, transformers.__version__, torch.__version__)

g = torch.Generator().manual_seed(7)
lengths = [1, 5, 17, 40, 64]
inputs = [torch.randint(0, 1024, (n,), generator=g).tolist() for n in lengths]
vecs, raw = [], []
with torch.no_grad():
    for ids in inputs:
        h = model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1].double()
        raw.append(h.tolist())
        vecs.append(torch.nn.functional.normalize(h, dim=0).tolist())
    # dimensions=48: truncate, then re-normalise (vLLM's pooler; Qwen3-Embedding MRL)
    trunc = [torch.nn.functional.normalize(torch.tensor(r[:48]), dim=0).tolist() for r in raw]
    # Batched with left padding, as sentence-transformers runs Qwen3-Embedding
    # (padding_side left): must equal the one-by-one vectors.
    L = max(lengths)
    ids = torch.zeros(len(inputs), L, dtype=torch.long)
    mask = torch.zeros(len(inputs), L, dtype=torch.long)
    for i, x in enumerate(inputs):
        ids[i, L - len(x):] = torch.tensor(x)
        mask[i, L - len(x):] = 1
    hb = model(input_ids=ids, attention_mask=mask).last_hidden_state[:, -1].double()
    hb = torch.nn.functional.normalize(hb, dim=1)
    for i in range(len(inputs)):
        d = (hb[i] - torch.tensor(vecs[i], dtype=torch.float64)).norm().item()
        print("left-padded batch vs alone, input", i, "abs L2", d)

os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "qwen3_ref.json"), "w") as f:
    json.dump({"source": "testdata/hf/qwen3 as Qwen3Model (AutoModel), float32, transformers " + transformers.__version__,
               "pooling": "last token of last_hidden_state (after final norm), L2-normalised",
               "input_ids": inputs, "embeddings": vecs,
               "dimensions": 48, "embeddings_dim48": trunc}, f)

# The same weights as a Qwen3Model checkpoint (no "model." prefix, no lm_head).
model.to(torch.bfloat16).save_pretrained(os.path.join(out, "qwen3_model"))
with safe_open(os.path.join(out, "qwen3_model", "model.safetensors"), "pt") as f:
    print(sorted(f.keys())[:6], len(list(f.keys())))
print(open(os.path.join(out, "qwen3_model", "config.json")).read())
