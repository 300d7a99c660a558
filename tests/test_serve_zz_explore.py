import json
import pytest
from openai import OpenAI
from sculptor_rl.agent.toolcalls import format_tool_call as call
from sculptor_rl.serve import ServeConfig, Server, bind, build_app

LOG = "Here is a log.\n\n" + "\n".join(f"Line {i}: the river crossed the bridge." for i in range(20)) + \
      "\nThe code word is QX7PLM2A.\n" + "\n".join(f"Line {i}: the river crossed the bridge." for i in range(20, 40))
R = "Reply with exactly this text and nothing else:\n"


@pytest.mark.slow
def test_explore(vllm_engine, fmt):
    app = build_app(vllm_engine, fmt, ServeConfig(api_key="k", max_new_tokens=64), "m")
    variants = {
        "V1 sys LOG": [{"role": "system", "content": LOG}, {"role": "user", "content": R + call("search_context", {"query": "code word", "role": "all"})}],
        "V4 river": [{"role": "user", "content": R + call("search_context", {"query": "river"})}],
        "V4b code": [{"role": "user", "content": "The code word is QX7PLM2A. " + R + call("search_context", {"query": "code word"})}],
        "V4c code nl": [{"role": "user", "content": "The code word is QX7PLM2A.\n\n" + R + call("search_context", {"query": "code word"})}],
        "V5 sys": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": R + call("search_context", {"query": "river"})}],
        "V7": [{"role": "user", "content": "Call search_context now. " + R + call("search_context", {"query": "river"})}],
        "V8": [{"role": "user", "content": "Copy this text exactly:\n" + call("search_context", {"query": "river"})}],
        "V9 two msgs": [{"role": "user", "content": LOG}, {"role": "user", "content": R + call("search_context", {"query": "code word"})}],
        "V10 fold": [{"role": "user", "content": R + call("fragment_context", {"start_marker": "Reply", "end_marker": "else:"})}],
    }
    with Server(app, bind("127.0.0.1", 0), log_level="warning") as s:
        c = OpenAI(base_url=s.url, api_key="k", max_retries=0, timeout=600)
        for name, msgs in variants.items():
            for temp in (0,):
                r = c.chat.completions.create(model="m", messages=msgs, temperature=temp, max_tokens=48,
                                              extra_body={"sculptor": {"return_trace": True, "max_tool_calls": 2}})
                t = r.sculptor_trace
                print(f"\n### {name}: stop={t['stop_reason']} calls={t['tool_calls']} finish={r.choices[0].finish_reason} content={r.choices[0].message.content[:100]!r}")
                for st in t["steps"]:
                    print("   step", repr(st["text"][:150]), [(x["name"], x["ok"], x["result"][:120]) for x in st["calls"]])
