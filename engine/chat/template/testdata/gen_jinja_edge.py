# Renders testdata/jinja_edge_cases.json with Python Jinja2 configured as transformers
# configures it for chat templates, writing jinja_edge_ref.json:
#   python3 gen_jinja_edge.py jinja_edge_cases.json jinja_edge_ref.json
# Emulates transformers' chat-template environment (ImmutableSandboxedEnvironment,
# trim_blocks, lstrip_blocks, loopcontrols, tojson without HTML escaping).
import json, sys
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import loopcontrols
from jinja2.exceptions import TemplateError
def raise_exception(m): raise TemplateError(m)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
cases = json.load(open(sys.argv[1]))
out = []
for c in cases:
    t = env.from_string(c["template"])
    try:
        out.append({"template": c["template"], "vars": c["vars"], "rendered": t.render(**c["vars"])})
    except Exception as e:
        out.append({"template": c["template"], "vars": c["vars"], "error": repr(e)})
json.dump(out, open(sys.argv[2], "w"), indent=1, ensure_ascii=False)
