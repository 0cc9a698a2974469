"""Checkers shared by the agent-protocol tests (test_agent_protocols.py, test_agent_replays.py):
a small JSON Schema validator, a checker for Codex's apply_patch grammar, a hand-written PDF
maker and SSE parsing for the three streaming protocols.

No third-party validator is installed in the venv (jsonschema, lark), so these are written out;
each is small enough to read in one sitting and strict about what it does check.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
APPLY_PATCH_LARK_FILE = REPO / "tests" / "golden" / "codex_apply_patch.lark"

# Codex's apply_patch grammar (the same text as tests/golden/codex_apply_patch.lark).
APPLY_PATCH_LARK_FALLBACK = r'''start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?

hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change_move? change?

filename: /(.+)/
add_line: "+" /(.*)/ LF -> line

change_move: "*** Move to: " filename LF
change: (change_context | change_line)+ eof_line?
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
eof_line: "*** End of File" LF

%import common.LF
'''


def apply_patch_grammar() -> str:
    if APPLY_PATCH_LARK_FILE.is_file():
        return APPLY_PATCH_LARK_FILE.read_text(encoding="utf-8")
    return APPLY_PATCH_LARK_FALLBACK


# --- JSON Schema (the subset the tests' schemas use) ---------------------------------------

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_KNOWN = {"type", "properties", "required", "additionalProperties", "enum", "const", "items",
          "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "description",
          "title", "default", "anyOf", "$schema"}


def schema_errors(value, schema: dict, path: str = "$", *, partial: bool = False) -> list[str]:
    """Violations of `schema` by `value` (empty when valid). Refuses keywords it does not know,
    so a test cannot pass by a keyword being silently ignored here; with partial=True (schemas
    recorded from real agents) it checks the keywords it knows and skips the others."""
    unknown = set(schema) - _KNOWN - {"exclusiveMinimum", "exclusiveMaximum", "propertyNames", "pattern",
                                      "format", "uniqueItems", "oneOf", "allOf", "not"}
    assert not unknown or partial, f"schema_errors does not implement {unknown}"
    if partial:
        schema = {k: v for k, v in schema.items() if k in _KNOWN}
    errors: list[str] = []
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](value) for t in types):
            return [f"{path}: {value!r} is not of type {schema['type']}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path}: {value!r} != {schema['const']!r}")
    if "anyOf" in schema and all(schema_errors(value, s, path, partial=partial) for s in schema["anyOf"]):
        errors.append(f"{path}: {value!r} matches none of anyOf")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} > maximum {schema['maximum']}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{path}: {value!r} shorter than {schema['minLength']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path}: {value!r} longer than {schema['maxLength']}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{path}: more than {schema['maxItems']} items")
        if isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                errors += schema_errors(item, schema["items"], f"{path}[{i}]", partial=partial)
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{path}: missing required {key!r}")
        for key, item in value.items():
            if key in props:
                errors += schema_errors(item, props[key], f"{path}.{key}", partial=partial)
            elif schema.get("additionalProperties") is False:
                errors.append(f"{path}: unexpected property {key!r}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += schema_errors(item, schema["additionalProperties"], f"{path}.{key}", partial=partial)
    return errors


def assert_valid(value, schema: dict, what: str = "value", *, partial: bool = False) -> None:
    errors = schema_errors(value, schema, partial=partial)
    assert not errors, f"{what} does not match its schema: {errors}\nvalue: {value!r}"


def parse_json_object(text: str, what: str = "text") -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise AssertionError(f"{what} is not JSON ({e}): {text!r}") from None
    assert isinstance(value, dict), f"{what} is not a JSON object: {text!r}"
    return value


# --- apply_patch grammar ---------------------------------------------------------------------

def apply_patch_errors(text: str, *, complete: bool = True) -> list[str]:
    """Checks `text` against the apply_patch grammar, line by line (a state machine equivalent
    to the Lark grammar). With complete=False the text may stop anywhere (a generation cut by
    its token limit): every whole line must fit the grammar, and the tail after the last LF is
    not checked beyond the first line's prefix."""
    lines = text.split("\n")
    tail = lines.pop()  # after the final LF ("" when the text ends with LF)
    if not lines:
        ok = "*** Begin Patch".startswith(tail) if not complete else False
        return [] if ok else [f"does not start with '*** Begin Patch\\n': {text[:60]!r}"]
    if lines[0] != "*** Begin Patch":
        return [f"does not start with '*** Begin Patch\\n': {text[:60]!r}"]
    headers = ("*** Add File: ", "*** Delete File: ", "*** Update File: ")
    changes = ("update", "moved", "change")
    state = "need_hunk"  # need_hunk add0 add after_hunk update moved change ended
    for n, line in enumerate(lines[1:], 2):
        header = next((h for h in headers if line.startswith(h) and len(line) > len(h)), None)
        if state == "ended":
            return [f"line {n} {line!r}: text after '*** End Patch'"]
        if header and state != "add0":
            state = {"*** Add File: ": "add0", "*** Delete File: ": "after_hunk",
                     "*** Update File: ": "update"}[header]
        elif line == "*** End Patch" and state not in ("need_hunk", "add0"):
            state = "ended"
        elif state in ("add0", "add") and line.startswith("+"):
            state = "add"
        elif state == "update" and line.startswith("*** Move to: ") and len(line) > len("*** Move to: "):
            state = "moved"
        elif state in changes and (line == "@@" or (line.startswith("@@ ") and len(line) > 3)
                                   or line[:1] in ("+", "-", " ")):
            state = "change"
        elif state == "change" and line == "*** End of File":
            state = "after_hunk"
        else:
            return [f"line {n} {line!r}: not allowed after state {state}\n{text}"]
    if not complete:
        return []
    if state == "ended" and tail == "":
        return []
    if tail == "*** End Patch" and state not in ("need_hunk", "add0", "ended"):
        return []
    return [f"does not end with '*** End Patch' (state {state}, tail {tail!r})\n{text}"]


# --- a PDF written by hand --------------------------------------------------------------------

def make_pdf(pages: list[str]) -> bytes:
    """A valid PDF with one page per string, each showing that string in Helvetica."""
    n = len(pages)
    font_id = 3 + 2 * n
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>",
            f"<< /Type /Pages /Kids [{' '.join(f'{3 + 2 * i} 0 R' for i in range(n))}] /Count {n} >>".encode()]
    for i, text in enumerate(pages):
        content = f"BT /F1 24 Tf 20 100 Td ({text}) Tj ET".encode()
        objs.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 200] /Contents {4 + 2 * i} 0 R "
                    f"/Resources << /Font << /F1 {font_id} 0 R >> >> >>".encode())
        objs.append(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
    objs.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, obj in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + obj + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    return bytes(out)


# --- SSE --------------------------------------------------------------------------------------

def sse_events(body: bytes) -> list[tuple[str | None, str]]:
    """(event name or None, data) for each event of an SSE body; checks the framing."""
    text = body.decode("utf-8")
    assert text.endswith("\n\n"), f"SSE body does not end with a blank line: {text[-200:]!r}"
    events = []
    for block in text[:-2].split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                assert name is None, f"two event lines: {block!r}"
                name = value
            elif field == "data":
                data.append(value)
            else:
                raise AssertionError(f"unexpected SSE line {line!r} in {block!r}")
        if not data and name is None:
            continue
        assert data, f"event without data: {block!r}"
        events.append((name, "\n".join(data)))
    return events


ANTHROPIC_EVENTS = {"message_start", "ping", "content_block_start", "content_block_delta",
                    "content_block_stop", "message_delta", "message_stop", "error"}


def check_anthropic_stream(body: bytes) -> dict:
    """Validates a Messages stream: the event order, the `event:` names matching the data
    types, blocks opened/closed in order. Returns {"message_start", "blocks", "stop_reason",
    "stop_sequence", "usage", "types"}; each block is {"type", ..., "text"/"input"(dict)}."""
    events = sse_events(body)
    datas = []
    for name, data in events:
        obj = json.loads(data)
        assert obj["type"] in ANTHROPIC_EVENTS, obj
        assert name == obj["type"], f"event: {name} carries data of type {obj['type']}"
        datas.append(obj)
    types = [d["type"] for d in datas]
    assert "error" not in types, datas
    assert types[0] == "message_start", types
    assert types[-1] == "message_stop" and types.count("message_stop") == 1, types
    assert types[-2] == "message_delta" and types.count("message_delta") == 1, types
    start = datas[0]["message"]
    assert start["role"] == "assistant" and start["type"] == "message" and start["content"] == [], start
    assert isinstance(start["id"], str) and start["id"], start
    assert isinstance(start["usage"]["input_tokens"], int), start
    blocks: list[dict] = []
    open_index = None
    for d in datas[1:-2]:
        if d["type"] == "ping":
            continue
        if d["type"] == "content_block_start":
            assert open_index is None, f"block {d['index']} opened inside block {open_index}"
            assert d["index"] == len(blocks), (d, len(blocks))
            block = dict(d["content_block"])
            assert block["type"] in ("text", "tool_use", "thinking"), block
            if block["type"] == "tool_use":
                assert block["id"] and block["name"] and block["input"] == {}, block
                block["partial_json"] = ""
            blocks.append(block)
            open_index = d["index"]
        elif d["type"] == "content_block_delta":
            assert d["index"] == open_index, d
            block, delta = blocks[open_index], d["delta"]
            if block["type"] == "text":
                assert delta["type"] == "text_delta", d
                block["text"] += delta["text"]
            elif block["type"] == "tool_use":
                assert delta["type"] == "input_json_delta", d
                block["partial_json"] += delta["partial_json"]
            else:
                assert delta["type"] in ("thinking_delta", "signature_delta"), d
        elif d["type"] == "content_block_stop":
            assert d["index"] == open_index, d
            block = blocks[open_index]
            if block["type"] == "tool_use":
                raw = block.pop("partial_json") or "{}"
                try:
                    block["input"] = json.loads(raw)
                    assert isinstance(block["input"], dict), block
                except json.JSONDecodeError:  # legal only for a call cut by max_tokens (checked below)
                    block["input"], block["cut_input"] = None, raw
            open_index = None
        else:
            raise AssertionError(f"unexpected {d['type']} between message_start and message_delta: {types}")
    assert open_index is None, "a content block was never stopped"
    delta = datas[-2]
    assert delta["delta"]["stop_reason"] in ("end_turn", "max_tokens", "stop_sequence", "tool_use"), delta
    assert isinstance(delta["usage"]["output_tokens"], int), delta
    if delta["delta"]["stop_reason"] == "tool_use":
        assert any(b["type"] == "tool_use" for b in blocks), (delta, blocks)
    # Anthropic streams a call's input as the model writes it: when max_tokens cuts the call,
    # the last block's JSON is incomplete; anywhere else it must parse.
    for i, b in enumerate(blocks):
        if "cut_input" in b:
            assert delta["delta"]["stop_reason"] == "max_tokens" and i == len(blocks) - 1, (delta, b)
    return {"message_start": start, "blocks": blocks, "stop_reason": delta["delta"]["stop_reason"],
            "stop_sequence": delta["delta"].get("stop_sequence"), "usage": delta["usage"], "types": types}


def check_responses_stream(events: list[dict]) -> dict:
    """Validates the typed events of a Responses stream (dicts, in order): sequence numbers,
    created/in_progress first, completed/incomplete last, every item added before its deltas
    and done, deltas concatenating to the done values and to the final response's items.
    Returns the final response (a dict)."""
    types = [e["type"] for e in events]
    seq = [e["sequence_number"] for e in events]
    assert all(isinstance(s, int) for s in seq), seq
    assert all(b > a for a, b in zip(seq, seq[1:])), f"sequence_number not increasing: {seq}"
    assert types[:2] == ["response.created", "response.in_progress"], types
    assert types[-1] in ("response.completed", "response.incomplete"), types
    assert sum(t in ("response.completed", "response.incomplete", "response.failed") for t in types) == 1, types
    final = events[-1]["response"]
    assert final["status"] == ("completed" if types[-1] == "response.completed" else "incomplete"), final
    rid = events[0]["response"]["id"]
    assert events[0]["response"]["status"] in ("in_progress", "queued"), events[0]
    assert final["id"] == rid and events[1]["response"]["id"] == rid
    items: dict[int, dict] = {}
    done_items: dict[int, dict] = {}
    text_parts: dict[tuple[int, int], str] = {}
    args: dict[int, str] = {}
    custom: dict[int, str] = {}
    for e in events[2:-1]:
        t = e["type"]
        oi = e.get("output_index")
        if t == "response.output_item.added":
            assert oi == len(items), (e, len(items))
            items[oi] = e["item"]
        elif t == "response.output_item.done":
            assert oi in items and oi not in done_items, e
            assert e["item"]["id"] == items[oi]["id"] and e["item"]["type"] == items[oi]["type"], e
            done_items[oi] = e["item"]
        else:
            assert oi in items and oi not in done_items, f"{t} outside its item: {e}"
            assert e.get("item_id") == items[oi]["id"], e
            if t == "response.content_part.added":
                text_parts[(oi, e["content_index"])] = ""
            elif t == "response.output_text.delta":
                text_parts[(oi, e["content_index"])] += e["delta"]
            elif t == "response.output_text.done":
                assert e["text"] == text_parts[(oi, e["content_index"])], e
            elif t == "response.content_part.done":
                assert e["part"]["text"] == text_parts[(oi, e["content_index"])], e
            elif t == "response.function_call_arguments.delta":
                args[oi] = args.get(oi, "") + e["delta"]
            elif t == "response.function_call_arguments.done":
                assert e["arguments"] == args.get(oi, ""), e
            elif t == "response.custom_tool_call_input.delta":
                custom[oi] = custom.get(oi, "") + e["delta"]
            elif t == "response.custom_tool_call_input.done":
                assert e["input"] == custom.get(oi, ""), e
            else:
                raise AssertionError(f"unexpected event {t}: {types}")
    assert set(done_items) == set(items), f"items never done: {set(items) - set(done_items)}"
    assert len(final["output"]) == len(items), (final["output"], items)
    for oi, item in done_items.items():
        assert final["output"][oi]["id"] == item["id"], (oi, final["output"][oi], item)
        if item["type"] == "message":
            text = "".join(text_parts.get((oi, ci), "") for ci in range(len(item["content"])))
            assert "".join(p["text"] for p in item["content"]) == text, (item, text)
        elif item["type"] == "function_call":
            assert item["arguments"] == args.get(oi, ""), (item, args.get(oi))
        elif item["type"] == "custom_tool_call":
            assert item["input"] == custom.get(oi, ""), (item, custom.get(oi))
    return final


def check_chat_stream(body: bytes) -> dict:
    """Validates a chat.completion.chunk stream ending with [DONE]; reassembles content and
    tool calls. Returns {"content", "tool_calls", "finish_reason", "usage", "chunks"}."""
    payloads = [data for _, data in sse_events(body)]
    assert payloads and payloads[-1] == "[DONE]", payloads[-3:]
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert len({c["id"] for c in chunks}) == 1, "chunk ids differ"
    content, calls, finish, usage = "", {}, [], None
    for c in chunks:
        assert c["object"] == "chat.completion.chunk", c
        if c.get("usage"):
            usage = c["usage"]
        for choice in c["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            for tc in delta.get("tool_calls") or []:
                slot = calls.setdefault(tc["index"], {"id": None, "name": None, "arguments": ""})
                if tc.get("id"):
                    assert slot["id"] is None, f"second id for tool call {tc['index']}"
                    slot["id"] = tc["id"]
                    assert tc.get("type") == "function", tc
                fn = tc.get("function") or {}
                if fn.get("name"):
                    slot["name"] = fn["name"]
                slot["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                finish.append(choice["finish_reason"])
    assert len(finish) == 1, finish
    tool_calls = [calls[i] for i in sorted(calls)]
    for tc in tool_calls:
        assert tc["id"] and tc["name"], tc
    return {"content": content, "tool_calls": tool_calls, "finish_reason": finish[0], "usage": usage,
            "chunks": chunks}


def raw_error_type(obj) -> str:
    """The `type` of an Anthropic-shaped error body, checking the shape."""
    assert isinstance(obj, dict) and obj.get("type") == "error", obj
    assert isinstance(obj["error"], dict) and obj["error"]["message"], obj
    return obj["error"]["type"]


WORD = re.compile(r"[A-Za-z]{3,}")
