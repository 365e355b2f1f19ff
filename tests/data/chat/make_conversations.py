#!/usr/bin/env python3
"""Write conversations.jsonl (the chat-template test conversations, tests/cli/t0250)."""
import json, os

W = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city.",
     "parameters": {"type": "object", "properties": {
         "city": {"type": "string", "description": "The city's name, e.g. \"Paris\""},
         "days": {"type": "integer", "description": "  Days ahead  "},
         "units": {"type": ["string", "null"], "description": "celsius or fahrenheit"}},
         "required": ["city"]}}}
S = {"type": "function", "function": {"name": "search", "description": "Search the web.",
     "parameters": {"type": "object", "properties": {
         "query": {"type": "string", "description": "What to look for"},
         "tags": {"type": "array", "items": {"type": "string"}, "description": "Filters"},
         "opts": {"type": "object", "additionalProperties": {"type": "number"}, "description": "Options"}},
         "required": ["query"]}}}


def tc(name, args, i="call_1"):
    return {"id": i, "type": "function", "function": {"name": name, "arguments": args}}


def u(c): return {"role": "user", "content": c}
def a(c): return {"role": "assistant", "content": c}
def s(c): return {"role": "system", "content": c}


C = [
    {"messages": [u("Hello!")], "add_generation_prompt": True},
    {"messages": [s("You are a helpful assistant."), u("What is 2+2?"), a("4")], "add_generation_prompt": False},
    {"messages": [s("Be brief."), u("Hi"), a("Hello."), u("Name a color."), a("Blue."), u("Another?")],
     "add_generation_prompt": True},
    {"messages": [u("One"), a("Two"), u("Three")], "add_generation_prompt": True},
    {"messages": [s(""), u(""), a("")], "add_generation_prompt": False},
    {"messages": [u("Grüße, 世界! 👋 \"double\" and 'single' quotes, a \\ backslash,\ta tab, é\u00a0nbsp"),
                  a("  \n Ответ: ça va — “fine”.\n\n ")], "add_generation_prompt": True},
    {"messages": [u("Weather in Paris?"),
                  {"role": "assistant", "content": None, "tool_calls": [tc("get_weather", {
                      "city": "Paris", "days": 2, "ratio": 1.5, "ok": True, "none": None, "list": [1, 2.25, "x"]})]},
                  {"role": "tool", "name": "get_weather", "content": "{\"temp\": 21}"}, a("It is 21 degrees.")],
     "tools": [W], "add_generation_prompt": False},
    {"messages": [s("You can call tools."), u("Find cats")], "tools": [W, S], "add_generation_prompt": True},
    {"messages": [u("Two calls"),
                  {"role": "assistant", "content": "", "tool_calls": [tc("get_weather", {"city": "Rome"}),
                                                                      tc("search", {"query": "rome"}, "call_2")]},
                  {"role": "tool", "name": "get_weather", "content": "sunny"},
                  {"role": "tool", "name": "search", "content": "results"}],
     "tools": [W, S], "add_generation_prompt": True},
    {"messages": [u("Think first"), a("<think>\nlet me see\n</think>\n\nThe answer is 7."), u("Thanks")],
     "add_generation_prompt": True},
    {"messages": [u("String arguments"),
                  {"role": "assistant", "content": "", "tool_calls": [tc("search", "{\"query\": \"dogs\"}")]},
                  {"role": "tool", "name": "search", "content": "dogs found"}], "add_generation_prompt": True},
    {"messages": [s("Only a system turn.")], "add_generation_prompt": False},
    {"messages": [u("Unicode tool"),
                  {"role": "assistant", "content": "", "tool_calls": [tc("search", {"query": "naïve café ☕", "tags": ["ü", "\n"]})]},
                  {"role": "tool", "name": "search", "content": "ok ✓"}, a("Done ✓")],
     "tools": [S], "add_generation_prompt": False},
    {"messages": [u("  padded  \n"), a("\tanswer\t")], "add_generation_prompt": False},
    {"messages": [{"role": "user", "content": "Hi", "extra": "ignored"}, {"role": "assistant", "content": "Hey", "weight": 0}],
     "add_generation_prompt": True},
    {"messages": [a("I start."), u("Odd order")], "add_generation_prompt": True},
    {"messages": [u("Tools but no calls"), a("None needed.")], "tools": [S], "add_generation_prompt": False},
    {"messages": [s("Sys"), u("a"), u("b")], "add_generation_prompt": True},
]

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "conversations.jsonl"), "w", encoding="utf-8") as f:
    for c in C:
        f.write(json.dumps(c, ensure_ascii=False) + "\n")
