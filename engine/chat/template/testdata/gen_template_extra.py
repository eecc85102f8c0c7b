# Renders the Qwen templates of ../../../../testdata/templates (and the Qwen3
# tokenizer_config.json template) over extra conversations with Python Jinja2
# configured as transformers' apply_chat_template configures it, writing
# template_extra_ref.json. Run from this folder:
#   python3 gen_template_extra.py
import json, os
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import loopcontrols
from jinja2.exceptions import TemplateError

def raise_exception(m): raise TemplateError(m)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

tdir = "../../../../testdata/templates"
templates = {n: open(os.path.join(tdir, n)).read() for n in sorted(os.listdir(tdir)) if n.endswith(".jinja")}
templates["tokenizer_config"] = json.load(open("../../../../testdata/tokenizers/qwen3/tokenizer_config.json"))["chat_template"]

weather = {"type": "function", "function": {"name": "get_weather", "description": "Weather <now> & later",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
    "days": {"type": "integer", "minimum": 1}, "opts": {"type": "object"}}, "required": ["city"]}}}
search = {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
convs = [
    {"messages": [{"role": "system", "content": "Système: réponds en français 日本"}, {"role": "user", "content": "Quel temps ?"}], "tools": [weather, search]},
    {"messages": [{"role": "user", "content": "Two calls"}, {"role": "assistant", "content": "Checking both.", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "opts": {"units": "metric", "x": [1, 2]}}}},
        {"type": "function", "function": {"name": "search", "arguments": {"q": "rain \"today\""}}}]},
        {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "no results"}, {"role": "user", "content": "Thanks"}], "tools": [weather, search]},
    {"messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
        {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2", "reasoning_content": "thinking\nhard"}], "add_generation_prompt": False},
    {"messages": [{"role": "user", "content": "  spaced  \n"}, {"role": "assistant", "content": "<think>\nmm\n</think>\n\n  final  "}, {"role": "user", "content": "again"}], "enable_thinking": True},
    {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}], "enable_thinking": False, "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "call"}, {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "search", "arguments": {"q": "x", "n": None, "flag": True}}}]},
        {"role": "tool", "content": "{\"r\": [1, 2]}"}]},
    {"messages": [{"role": "assistant", "content": "I start"}, {"role": "user", "content": "ok"}]},
]
out = []
for name, src in templates.items():
    t = env.from_string(src)
    for conv in convs:
        kw = {k: v for k, v in conv.items() if k not in ("messages", "tools", "add_generation_prompt")}
        agp = conv.get("add_generation_prompt", True)
        case = {"template": name, "conversation": conv, "add_generation_prompt": agp}
        try:
            case["rendered"] = t.render(messages=conv["messages"], tools=conv.get("tools"), add_generation_prompt=agp, eos_token="<|im_end|>", **kw)
        except Exception as e:
            case["error"] = repr(e)
        out.append(case)
json.dump({"generator": "jinja2 " + __import__("jinja2").__version__ + " (transformers settings)", "renders": out}, open("template_extra_ref.json", "w"), indent=1, ensure_ascii=False)
print(len(out), sum("error" in c for c in out))
