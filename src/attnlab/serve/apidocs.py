"""GET /docs: the API's reference as one self-contained HTML page, made from the app's OpenAPI schema.

FastAPI's own /docs and /redoc pages load Swagger UI and ReDoc from a CDN, so offline they show
nothing; this page needs no script and no outside asset. The schema itself is at /openapi.json.
"""

from __future__ import annotations

import json
from html import escape

_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
h2 { margin-top: 2.2rem; border-bottom: 1px solid #ddd; } code, .type { font-family: ui-monospace, monospace; }
.op { margin: 1.2rem 0; padding: .6rem 1rem; border-left: 4px solid #36c; background: #f6f8fb; }
.method { font-weight: bold; text-transform: uppercase; margin-right: .5rem; }
table { border-collapse: collapse; margin: .4rem 0; } td, th { padding: .2rem .7rem; text-align: left;
vertical-align: top; border-bottom: 1px solid #e4e4e4; } .muted { color: #666; }
"""

_CONSTRAINTS = ("minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "default")


def _ref_name(schema: dict) -> str | None:
    ref = schema.get("$ref", "")
    return ref.rsplit("/", 1)[-1] if ref else None


def _type(schema: dict | bool) -> str:
    """A short type for a property schema: `str`, `list[str]`, `ExplainRequest`, `int | null`."""
    if not isinstance(schema, dict):  # JSON Schema's `true`: anything
        return "any"
    if name := _ref_name(schema):
        return f'<a href="#{escape(name)}">{escape(name)}</a>'
    if "anyOf" in schema:
        return " | ".join(_type(s) for s in schema["anyOf"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list[{_type(schema.get('items', {}))}]"
    if kind == "object" and "additionalProperties" in schema:
        return f"dict[str, {_type(schema['additionalProperties'])}]"
    return escape(str(kind))


def _schema_table(name: str, schema: dict) -> str:
    required = set(schema.get("required", ()))
    rows = []
    for prop, sub in schema.get("properties", {}).items():
        limits = ", ".join(f"{k} {json.dumps(sub[k])}" for k in _CONSTRAINTS if k in sub)
        note = " ".join(x for x in (sub.get("description", ""), f"({limits})" if limits else "") if x)
        rows.append(
            f"<tr><td><code>{escape(prop)}</code>{'' if prop in required else ' <span class=muted>optional</span>'}"
            f"</td><td class=type>{_type(sub)}</td><td>{escape(note)}</td></tr>"
        )
    doc = f"<p>{escape(schema['description'])}</p>" if schema.get("description") else ""
    return f'<h3 id="{escape(name)}">{escape(name)}</h3>{doc}<table>{"".join(rows)}</table>'


def _operation(path: str, method: str, op: dict) -> str:
    body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    request = f"<p>Request body: {_type(body)}</p>" if body else ""
    answers = []
    for code, resp in op.get("responses", {}).items():
        schema = resp.get("content", {}).get("application/json", {}).get("schema", {})
        shown = f" ({_type(schema)})" if schema else ""
        answers.append(f"<tr><td>{escape(code)}</td><td>{escape(resp.get('description', ''))}{shown}</td></tr>")
    return (
        f"<div class=op><span class=method>{escape(method)}</span><code>{escape(path)}</code>"
        f"<p>{escape(op.get('summary', ''))}</p>{request}<table>{''.join(answers)}</table></div>"
    )


def api_docs_html(spec: dict) -> str:
    """The HTML of GET /docs for an OpenAPI `spec` (FastAPI's `app.openapi()`)."""
    info = spec.get("info", {})
    ops = [
        _operation(path, method, op)
        for path, methods in spec.get("paths", {}).items()
        for method, op in methods.items()
    ]
    schemas = [_schema_table(n, s) for n, s in spec.get("components", {}).get("schemas", {}).items()]
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(info.get('title', 'API'))}"
        f" — API</title><style>{_STYLE}</style></head><body><h1>{escape(info.get('title', 'API'))} "
        f"<span class=muted>{escape(str(info.get('version', '')))}</span></h1>"
        f"<p>{escape(info.get('description', ''))}</p><p>The machine-readable schema: "
        f'<a href="/openapi.json">/openapi.json</a> (OpenAPI {escape(str(spec.get("openapi", "")))}). '
        f'Back to <a href="/">the explorer</a>.</p>'
        f"<h2>Operations</h2>{''.join(ops)}<h2>Schemas</h2>{''.join(schemas)}</body></html>"
    )


__all__ = ["api_docs_html"]
