#!/usr/bin/env python3
"""Renders tokenize/testdata/chat/cases.json with each model's chat template the way vLLM does,
and writes tokenize/testdata/chat/<model>.golden.json for the Go tests.

Rendering is Python's jinja2 configured as transformers' apply_chat_template configures it
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, tojson =
json.dumps(ensure_ascii=False), raise_exception, strftime_now; special tokens as variables).
Before rendering, messages and tools get vLLM's preprocessing (entrypoints/chat_utils.py:
_parse_chat_message_content with the "string" content format, _postprocess_messages; tools as
ChatCompletionToolsParam.model_dump()), re-stated here because vLLM itself is not installable.
Requests vLLM would refuse or that need multimodal processing are marked "skip".

Usage (after make testdata): python3 scripts/oracle/chat_goldens.py
Needs only jinja2 (Debian: python3-jinja2).
"""
import copy
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
EXT = os.path.join(ROOT, "testdata", "ext")
CHAT = os.path.join(ROOT, "tokenize", "testdata", "chat")
MODELS = ["qwen2_5", "qwen3", "llama3", "llama3_1", "deepseek_v3"]


def token_str(v):
    if isinstance(v, dict):
        return v.get("content")
    return v


def specials(cfg):
    out = {}
    for k in ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]:
        v = token_str(cfg.get(k))
        if v:
            out[k] = v
    extra = [token_str(x) for x in cfg.get("additional_special_tokens") or []]
    if extra:
        out["additional_special_tokens"] = extra
    return out


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


class Skip(Exception):
    pass


def content_string(msg):
    content = msg.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
            continue
        t = part.get("type")
        if t in ("text", "input_text", "output_text"):
            v = part.get("text")
        elif t == "refusal":
            v = part.get("refusal")
        else:
            raise Skip("multimodal part " + str(t))
        if v is not None:
            texts.append(v)
    return "\n".join(texts)


def preprocess(req):
    conv = []
    for msg in req["messages"]:
        role = msg["role"]
        out = {"role": role, "content": content_string(msg)}
        if role == "assistant":
            if msg.get("tool_calls") is not None:
                out["tool_calls"] = copy.deepcopy(list(msg["tool_calls"]))
            if msg.get("reasoning") is not None:
                out["reasoning"] = msg["reasoning"]
                out["reasoning_content"] = msg["reasoning"]
        elif role == "tool":
            if "tool_call_id" in msg:
                out["tool_call_id"] = msg["tool_call_id"]
        if isinstance(msg.get("name"), str):
            out["name"] = msg["name"]
        conv.append(out)
    for m in conv:
        if m["role"] == "assistant" and isinstance(m.get("tool_calls"), list):
            if not m["tool_calls"]:
                m.pop("tool_calls")
                continue
            for item in m["tool_calls"]:
                a = item["function"].get("arguments")
                if isinstance(a, str):
                    try:
                        item["function"]["arguments"] = json.loads(a)
                    except json.JSONDecodeError:
                        item["function"]["arguments"] = {}
                elif not isinstance(a, (dict, list)):
                    item["function"]["arguments"] = {}
    tools = None
    if req.get("tools") is not None:
        tools = []
        for t in req["tools"]:
            f = t["function"]
            tools.append({"type": "function", "function": {"name": f["name"], "description": f.get("description"), "parameters": f.get("parameters")}})
    return conv, tools


def render(env, template, spec, req):
    if req.get("continue_final_message") or req.get("chat_template") or req.get("documents"):
        raise Skip("option not rendered here")
    conv, tools = preprocess(req)
    kwargs = dict(spec)
    kwargs.update(req.get("chat_template_kwargs") or {})
    return env.from_string(template).render(
        messages=conv, tools=tools, documents=None,
        add_generation_prompt=req.get("add_generation_prompt", True), **kwargs)


def main():
    cases = json.load(open(os.path.join(CHAT, "cases.json"), encoding="utf-8"))
    env = environment()
    for model in MODELS:
        path = os.path.join(EXT, model, "tokenizer_config.json")
        if not os.path.exists(path):
            sys.exit(f"{path} missing: run make testdata")
        cfg = json.load(open(path, encoding="utf-8"))
        template = cfg["chat_template"]
        spec = specials(cfg)
        out = []
        for case in cases:
            entry = {"name": case["name"]}
            try:
                entry["rendered"] = render(env, template, spec, case["request"])
            except Skip as e:
                entry["skip"] = str(e)
            except Exception as e:  # the template refused: vLLM answers 400
                entry["error"] = f"{type(e).__name__}: {e}"
            out.append(entry)
        with open(os.path.join(CHAT, model + ".golden.json"), "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(model, sum("rendered" in e for e in out), "rendered")


if __name__ == "__main__":
    main()
