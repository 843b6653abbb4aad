#!/usr/bin/env python3
"""Deterministic training corpus for the small Magnetar demo model.

    python3 scripts/train/corpus.py --out DIR [--seed 1] [--scale 1.0]

What this file owns: the command line; agent transcripts that call four tools (get_weather,
list_files, read_file, calculate) over the invented world; coding transcripts with the system
preamble, tool contract and tool results of `magnetar agent` (agent_contract.json); and writing
the JSON Lines files of the four kinds (prose, chat, agent, coding), the held-out prompts and
stats.json into DIR; see
scripts/train/README.md for the shapes. It is the entry point and imports its two siblings
from its own folder, so it runs from any current directory.

What it does not own: the invented world and its facts (world.py) and the prose and chat
generators (corpus_text.py). Rendering conversations with the DeepSeek V4 chat template and
turning text into token ids are done by `magnetar render`, which reads these JSONL files. No
text is downloaded; everything comes from the tables in these three files.

Determinism: only random.Random instances seeded from strings derived from --seed are used
(one stream for the world and one per kind and split), containers are lists and insertion
ordered dicts, and JSON is written with fixed options. The same seed and scale give
byte-identical files on every run. Held-out documents are never exact copies of training
documents: a held-out document that serialises like a training one is drawn again.
"""

import argparse
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # world.py and corpus_text.py sit next to this file

from corpus_text import ENTITY_QA, entity_round, generic_round, make_chat, make_prose  # noqa: E402
from world import SKIES, World, join_list, plural  # noqa: E402

# --------------------------------------------------------------------------------------------
# Agent transcripts
# --------------------------------------------------------------------------------------------

TOOLS = {
    "get_weather": {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "Name of the city."}},
            "required": ["city"]}}},
    "list_files": {"type": "function", "function": {
        "name": "list_files",
        "description": "List the files in a folder.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "Folder path, for example notes."}},
            "required": ["path"]}}},
    "read_file": {"type": "function", "function": {
        "name": "read_file",
        "description": "Read a text file and return its contents.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string",
                     "description": "Path of the file, for example notes/todo.txt."}},
            "required": ["path"]}}},
    "calculate": {"type": "function", "function": {
        "name": "calculate",
        "description": "Evaluate an arithmetic expression with integers, +, -, * and parentheses.",
        "parameters": {"type": "object", "properties": {
            "expression": {"type": "string",
                           "description": "The expression, for example (3 + 4) * 2."}},
            "required": ["expression"]}}},
}
TOOL_NAMES = list(TOOLS)
AGENT_SYSTEMS = [
    "You are a helpful assistant with access to tools.",
    "You are a helpful assistant.",
    "Use the tools when they help. Answer briefly.",
    "You are an assistant at an observatory. You can check the weather, read files and do "
    "arithmetic.",
]


class Step:
    """One tool call, its result, and the reasoning written before the call."""

    def __init__(self, name, args, result, think):
        self.name, self.args, self.result, self.think = name, args, result, think


class Task:
    """A user request with its tool steps and the final answer."""

    def __init__(self, user, steps, answer, final_think, needs=None):
        self.user, self.steps, self.answer, self.final_think = user, steps, answer, final_think
        self.needs = needs if needs is not None else [s.name for s in steps]


def weather_of(rng, city):
    temp = city.base_temp + rng.randint(-8, 8)
    sky = rng.choice(SKIES)
    if temp <= 1 and sky in ("rainy", "stormy"):
        sky = "snowy"
    return temp, sky


def weather_json(city, temp, sky):
    return json.dumps({"city": city.name, "temperature_c": temp, "sky": sky}, ensure_ascii=False)


def weather_step(rng, city, why):
    temp, sky = weather_of(rng, city)
    think = rng.choice([f"The user wants {why} in {city.name}. I will call get_weather.",
                        f"I need the current weather in {city.name}, so I will use get_weather."])
    return Step("get_weather", {"city": city.name}, weather_json(city, temp, sky), think), temp, sky


WEATHER_ASKS = [
    ("plain", ["What's the weather in {c}?", "What is the weather like in {c} right now?",
               "How is the weather in {c}?", "weather in {c}?",
               "Can you check the weather in {c}?"]),
    ("rain", ["Is it raining in {c}?", "Do I need an umbrella in {c} today?"]),
    ("temp", ["How warm is it in {c}?", "What is the temperature in {c}?", "Is it cold in {c}?"]),
    ("observe", ["Is tonight a good night to observe from {o}?",
                 "Can we use the telescope at {o} tonight?"]),
]


def task_weather(rng, w):
    city = rng.choice(w.cities)
    kind, asks = rng.choice(WEATHER_ASKS)
    user = rng.choice(asks).format(c=city.name, o=city.observatory.name)
    step, t, sky = weather_step(rng, city, "the weather" if kind != "observe"
                                else "to know if the sky is clear")
    base = rng.choice([f"It is {t} °C and {sky} in {city.name}.",
                       f"Right now it is {sky} in {city.name}, at {t} °C.",
                       f"The weather in {city.name} is {sky}, with a temperature of {t} °C."])
    wet = sky in ("rainy", "stormy", "snowy")
    if kind == "rain":
        lead = (f"Yes, it is {sky} in {city.name}." if wet else f"No, it is not raining in "
                f"{city.name}.")
        answer = f"{lead} The temperature is {t} °C."
    elif kind == "observe":
        good = sky == "clear"
        answer = (f"Yes. The sky over {city.name} is clear and it is {t} °C, so it is a good "
                  f"night for the telescope." if good else
                  f"Probably not. It is {sky} in {city.name} at {t} °C, and the telescope needs "
                  f"a clear sky.")
    else:
        answer = base
    final = f"The tool says it is {t} °C and {sky} in {city.name}. I will tell the user."
    return Task(user, [step], answer, final)


LIST_ASKS = ["What files are in the {f} folder?", "List the files in {f}.",
             "Show me what is in the folder {f}.", "What is inside {f}?"]
READ_ASKS = ["Read {p} for me.", "What does {p} say?", "Show me the contents of {p}.",
             "Open {p} and tell me what it contains.", "What is in the file {p}?"]


def list_answer(rng, folder, names):
    what = "folders" if folder == "." else "files"
    where = "The top folder" if folder == "." else f"The {folder} folder"
    place = "the top folder" if folder == "." else folder
    count = plural(len(names), what[:-1])
    verb = "is" if len(names) == 1 else "are"
    return rng.choice([f"{where} has {count}: {join_list(names)}.",
                       f"There {verb} {count} in {place}: {join_list(names)}."])


def read_answer(rng, path, summary):
    return rng.choice([f"The file {path} {summary}.", f"{path} {summary}.",
                       f"I read {path}. It {summary}."])


def task_list(rng, w):
    folder = rng.choice([f for f in w.folders if f != "."]) if rng.random() < 0.9 else "."
    names = w.folders[folder]
    user = (rng.choice(["What folders are there?", "List the files in the top folder.",
                        "What is in the current folder?"]) if folder == "." else
            rng.choice(LIST_ASKS).format(f=folder))
    step = Step("list_files", {"path": folder}, "\n".join(names),
                rng.choice([f"The user wants the files in {folder}. I will call list_files.",
                            f"I will use list_files on {folder}."]))
    final = f"The folder has {plural(len(names), 'entry', 'entries')}. I will list them."
    return Task(user, [step], list_answer(rng, folder, names), final)


def task_read(rng, w):
    path = rng.choice(list(w.files))
    text, summary = w.files[path]
    user = rng.choice(READ_ASKS).format(p=path)
    step = Step("read_file", {"path": path}, text,
                rng.choice([f"The user wants the contents of {path}. I will call read_file.",
                            f"I need to read {path} first, so I will use read_file."]))
    final = f"I have the text of {path}. I will summarise it."
    return Task(user, [step], read_answer(rng, path, summary), final)


def task_list_read(rng, w):
    folder = rng.choice([f for f in w.folders if f != "."])
    names = w.folders[folder]
    index = rng.randrange(len(names))
    name = names[index]
    path = f"{folder}/{name}"
    text, summary = w.files[path]
    if index == 0 and rng.random() < 0.5:
        user = rng.choice([f"List the files in {folder} and read the first one.",
                           f"Open the first file in the {folder} folder."])
    else:
        stem = name.split(".")[0].replace("_", " ")
        user = rng.choice([f"Find the {stem} file in {folder} and tell me what it says.",
                           f"There is a file about {stem} somewhere in {folder}. "
                           f"What does it say?"])
    steps = [Step("list_files", {"path": folder}, "\n".join(names),
                  f"I do not know the exact file name, so I will list {folder} first."),
             Step("read_file", {"path": path}, text,
                  f"The folder contains {name}. I will read it with read_file.")]
    return Task(user, steps, read_answer(rng, path, summary),
                f"I have read {path}. I will summarise it.")


def task_weather_compare(rng, w):
    a, b = rng.sample(w.cities, 2)
    user = rng.choice([f"Which is warmer right now, {a.name} or {b.name}?",
                       f"Compare the weather in {a.name} and {b.name}."])
    s1, t1, k1 = weather_step(rng, a, "to compare the weather")
    s2, t2, k2 = weather_step(rng, b, "to compare the weather")
    s2.think = (f"I have the weather in {a.name}. Now I need {b.name}, so I will call "
                f"get_weather again.")
    if t1 == t2:
        verdict = f"Both cities are at {t1} °C."
    else:
        (hw, ht), (cw, ct) = sorted([(a.name, t1), (b.name, t2)], key=lambda x: -x[1])
        verdict = f"{hw} is warmer: {ht} °C against {ct} °C in {cw}."
    answer = f"{verdict} The sky is {k1} in {a.name} and {k2} in {b.name}."
    return Task(user, [s1, s2], answer, "I have both results. I will compare the temperatures.")


# -- arithmetic ------------------------------------------------------------------------------

PREC = {"+": 1, "-": 1, "*": 2}


def random_expr(rng, n):
    """A random expression tree over n small integers: ('num', v) or (op, left, right)."""
    if n == 1:
        return ("num", rng.randint(1, 20) if rng.random() < 0.7 else rng.randint(21, 99))
    left = rng.randint(1, n - 1)
    op = rng.choice(["+", "-", "*", "*"] if n <= 3 else ["+", "-", "*"])
    return (op, random_expr(rng, left), random_expr(rng, n - left))


def evaluate(node):
    if node[0] == "num":
        return node[1]
    a, b = evaluate(node[1]), evaluate(node[2])
    return a + b if node[0] == "+" else a - b if node[0] == "-" else a * b


def render_expr(node, parent=0, right=False):
    """Infix text with parentheses where the tree's grouping needs them."""
    if node[0] == "num":
        return str(node[1])
    op = node[0]
    text = f"{render_expr(node[1], PREC[op])} {op} {render_expr(node[2], PREC[op], True)}"
    needs = PREC[op] < parent or (PREC[op] == parent and right and parent == 1)
    return f"({text})" if needs else text


WORD_PROBLEMS = [  # text, expression with the same placeholders, unit
    ("An observer takes {a} images each night for {b} nights and then {c} more. How many images "
     "is that in total?", "{a} * {b} + {c}", "images"),
    ("A telescope has {a} filters. {b} are broken and we buy {c} new ones. How many working "
     "filters do we have?", "{a} - {b} + {c}", "working filters"),
    ("We have {a} nights of data with {b} hours each, minus {c} hours lost to clouds. How many "
     "hours is that?", "{a} * {b} - {c}", "hours"),
    ("A magnetar turns once every {a} seconds. How many seconds do {b} turns plus {c} more turns "
     "take?", "{a} * ({b} + {c})", "seconds"),
]
CALC_ASKS = ["What is {e}?", "Calculate {e}.", "Please compute {e}.", "What's {e}?",
             "Can you work out {e}?", "{e} = ?"]


def task_calculate(rng, w):
    if rng.random() < 0.25:
        text, expr_t, unit = rng.choice(WORD_PROBLEMS)
        nums = {"a": rng.randint(2, 12), "b": rng.randint(2, 12), "c": rng.randint(1, 9)}
        if "{a} - {b}" in expr_t:
            nums["a"] += nums["b"]
        user = text.format(**nums)
        expr = expr_t.format(**nums)
        value = eval_text(expr)
        answer = rng.choice([f"That is {value} {unit}.", f"{expr} = {value}, so the answer is "
                             f"{value} {unit}."])
    else:
        tree = random_expr(rng, rng.randint(2, 4))
        while abs(evaluate(tree)) > 5000:  # keep results readable
            tree = random_expr(rng, rng.randint(2, 4))
        expr = render_expr(tree)
        value = evaluate(tree)
        user = rng.choice(CALC_ASKS).format(e=expr)
        answer = rng.choice([f"{expr} = {value}.", f"The result is {value}.",
                             f"The answer is {value}.", f"{expr} equals {value}."])
    step = Step("calculate", {"expression": expr}, str(value),
                rng.choice([f"The user wants the value of {expr}. I will call calculate.",
                            f"This is arithmetic, so I will use the calculate tool on {expr}."]))
    return Task(user, [step], answer, f"The tool returned {value}. I will give the result.")


def eval_text(expr):
    """Evaluates an expression string of integers, + - * and parentheses (no eval())."""
    tokens = expr.replace("(", " ( ").replace(")", " ) ").split()
    pos = 0

    def atom():
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok == "(":
            v = summ()
            pos += 1  # ")"
            return v
        return int(tok)

    def prod():
        nonlocal pos
        v = atom()
        while pos < len(tokens) and tokens[pos] == "*":
            pos += 1
            v *= atom()
        return v

    def summ():
        nonlocal pos
        v = prod()
        while pos < len(tokens) and tokens[pos] in "+-":
            op = tokens[pos]
            pos += 1
            v = v + prod() if op == "+" else v - prod()
        return v

    return summ()


def task_direct(rng, w):
    """A request that needs no tool."""
    r = rng.random()
    if r < 0.35:
        user, answer, think = generic_round(rng)
    elif r < 0.6:
        qa = rng.choice([q for q in ENTITY_QA if q[1] != "about"])
        e = rng.choice(w.by_kind[qa[0]])
        user, answer, think = entity_round(rng, w, qa, e, follow=False)
        think += " No tool is needed for this."
    elif r < 0.8:
        user = rng.choice(["Hello!", "Hi there.", "Good evening!"])
        answer = ("Hello! I can check the weather, look at files and do arithmetic. "
                  "What would you like to do?")
        think = "The user greets me. No tool is needed; I will greet them back."
    else:
        user = rng.choice(["What tools do you have?", "What can you do?"])
        answer = None  # filled in by make_agent from the tools offered
        think = "The user asks about my tools. I will list the ones I was given."
    return Task(user, [], answer, think, needs=[])


AGENT_TASKS = [(task_weather, 22), (task_list, 13), (task_read, 20), (task_calculate, 25),
               (task_list_read, 6), (task_weather_compare, 4), (task_direct, 10)]


def offered_tools(rng, needs):
    if rng.random() < 0.5:
        names = list(TOOL_NAMES)
    else:
        k = rng.randint(max(2, len(set(needs))), 4)
        others = [t for t in TOOL_NAMES if t not in needs]
        names = list(dict.fromkeys(needs)) + rng.sample(others, k - len(set(needs)))
    rng.shuffle(names)
    return names


def make_agent(rng, w):
    gen = rng.choices([g for g, _ in AGENT_TASKS], [k for _, k in AGENT_TASKS])[0]
    task = gen(rng, w)
    mode = "think" if rng.random() < 0.5 else "nothink"
    names = offered_tools(rng, task.needs)
    if task.answer is None:
        descs = [f"{n} ({TOOLS[n]['function']['description'][:-1].lower()})" for n in names]
        task.answer = f"I have {plural(len(names), 'tool')}: {join_list(descs)}."
    messages = []
    if rng.random() < 0.2:
        messages.append({"role": "system", "content": rng.choice(AGENT_SYSTEMS)})
    messages.append({"role": "user", "content": task.user})
    for i, step in enumerate(task.steps, start=1):
        call_id = f"call_{i}"
        turn = {"role": "assistant", "content": ""}
        if mode == "think":
            turn["reasoning_content"] = step.think
        turn["tool_calls"] = [{"id": call_id, "name": step.name, "arguments": step.args}]
        messages.append(turn)
        messages.append({"role": "tool", "tool_call_id": call_id, "content": step.result})
    final = {"role": "assistant", "content": task.answer}
    if mode == "think":
        final["reasoning_content"] = task.final_think
    messages.append(final)
    return {"mode": mode, "tools": [TOOLS[n] for n in names], "messages": messages}


def agent_prompt(doc):
    """The prompt part of a transcript that calls a tool, or None."""
    msgs = doc["messages"]
    first_call = next((m for m in msgs if m.get("tool_calls")), None)
    if first_call is None:
        return None
    prompt = [m for m in msgs[:msgs.index(first_call)]]
    return {"mode": doc["mode"], "tools": doc["tools"], "messages": prompt,
            "expected_tool": first_call["tool_calls"][0]["name"],
            "expected_arguments": first_call["tool_calls"][0]["arguments"]}


# --------------------------------------------------------------------------------------------
# Coding-agent transcripts: the contract of `magnetar agent`
# --------------------------------------------------------------------------------------------

# The agent's system preamble and tool list, as tests/agent/contract_test.cpp checks them
# against the agent itself.
with open(os.path.join(HERE, "agent_contract.json"), encoding="utf-8") as _f:
    AGENT_CONTRACT = json.load(_f)
WORKDIRS = ["/home/ana/observatory", "/home/leo/archive", "/srv/survey", "/home/mira/work",
            "/data/telescope", "/home/sam/projects/magnetars", "/tmp/run"]


def human_bytes(n):
    """core/format.cpp's human_bytes."""
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    v, u = float(n), 0
    while v >= 1024.0 and u < 5:
        v /= 1024.0
        u += 1
    return f"{n} B" if u == 0 else f"{v:.2f} {units[u]}"


def split_lines(text):
    """Lines as the agent's file tools count them (a final newline ends the last line)."""
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def tool_list(w, folder):
    """The `list` tool's text for a folder of the world's file system."""
    if folder == ".":
        rows = sorted(w.folders["."])
    else:
        rows = sorted(f"{n}  ({human_bytes(len(w.files[folder + '/' + n][0].encode()))})"
                      for n in w.folders[folder])
    footer = f"[{folder}: {len(rows)} entr{'y' if len(rows) == 1 else 'ies'}]"
    return "".join(r + "\n" for r in rows) + footer


def tool_read(path, text):
    """The `read` tool's text for a whole short file."""
    lines = split_lines(text)
    body = "".join(f"{i:6d}\t{line}\n" for i, line in enumerate(lines, start=1))
    return body + f"[{path}: lines 1-{len(lines)} of {len(lines)}]"


def tool_search(w, pattern, folder):
    """The `search` tool's text for a literal pattern under a folder (or '.')."""
    paths = sorted(p for p in w.files if folder == "." or p.startswith(folder + "/"))
    out, hits, files_hit = "", 0, 0
    for p in paths:
        any_hit = False
        for i, line in enumerate(split_lines(w.files[p][0]), start=1):
            if pattern in line:
                out += f"{p}:{i}: {line}\n"
                hits += 1
                any_hit = True
        files_hit += any_hit
    if hits == 0:
        return f"[no match in {folder}]"
    return out + (f"[{hits} match{'' if hits == 1 else 'es'} in "
                  f"{files_hit} file{'' if files_hit == 1 else 's'}]")


def result_header(name, args, ok=True):
    """The line the agent puts above each tool result (agent::result_header)."""
    def value(v):
        t = v if isinstance(v, str) else json.dumps(v)
        t = t.replace("\n", " ").replace("\r", " ").replace("\t", " ")
        return t[:57] + "..." if len(t) > 60 else t

    pairs = ", ".join(f"{k}={value(v)}" for k, v in args.items())
    return f"[{name}{' ' + pairs if pairs else ''}: {'ok' if ok else 'error'}]\n"


def coding_step(name, args, result, think):
    return Step(name, args, result_header(name, args) + result, think)


def coding_list(rng, w):
    folder = rng.choice([f for f in w.folders if f != "."]) if rng.random() < 0.85 else "."
    names = w.folders[folder]
    user = (rng.choice(["What folders are there?", "What is in this folder?",
                        "List the top folder.", "What is here?"]) if folder == "." else
            rng.choice(LIST_ASKS).format(f=folder))
    step = coding_step("list", {"path": folder}, tool_list(w, folder),
                       rng.choice([f"The user wants the files in {folder}. I will call list.",
                                   f"I will use list on {folder}."]))
    shown = [n.rstrip("/") for n in names] if folder == "." else names
    final = f"The folder has {plural(len(names), 'entry', 'entries')}. I will name them."
    return Task(user, [step], list_answer(rng, folder, shown), final)


def coding_read(rng, w):
    path = rng.choice(list(w.files))
    text, summary = w.files[path]
    user = rng.choice(READ_ASKS).format(p=path)
    step = coding_step("read", {"path": path}, tool_read(path, text),
                       rng.choice([f"The user wants the contents of {path}. I will call read.",
                                   f"I need to read {path} first, so I will use read."]))
    return Task(user, [step], read_answer(rng, path, summary),
                f"I have the lines of {path}. I will summarise them.")


def coding_list_read(rng, w):
    folder = rng.choice([f for f in w.folders if f != "."])
    names = w.folders[folder]
    name = rng.choice(names)
    path = f"{folder}/{name}"
    text, summary = w.files[path]
    stem = name.split(".")[0].replace("_", " ")
    user = rng.choice([f"Find the {stem} file in {folder} and tell me what it says.",
                       f"There is a file about {stem} somewhere in {folder}. What does it say?",
                       f"Somewhere in {folder} there is a file on {stem}. Summarise it.",
                       f"What does the {stem} file in {folder} say?"])
    steps = [coding_step("list", {"path": folder}, tool_list(w, folder),
                         f"I do not know the exact file name, so I will list {folder} first."),
             coding_step("read", {"path": path}, tool_read(path, text),
                         f"The folder holds {name}. I will read {path}.")]
    return Task(user, steps, read_answer(rng, path, summary),
                f"I have read {path}. I will summarise it.")


def coding_search(rng, w):
    path = rng.choice(list(w.files))
    lines = [ln for ln in split_lines(w.files[path][0])[1:] if ln.strip()]
    words = [t.strip(",.;:()") for ln in lines for t in ln.replace(",", " ").split()]
    words = [t for t in words if len(t) >= 5 and t.isalpha() and t[0].isupper()]
    if not words:
        return coding_read(rng, w)
    word = rng.choice(words)
    folder = "." if rng.random() < 0.6 else path.split("/")[0]
    result = tool_search(w, word, folder)
    where = sorted({ln.split(":")[0] for ln in result.split("\n") if not ln.startswith("[")})
    user = rng.choice([f"Which files mention {word}?", f"Where is {word} mentioned?",
                       f"Search for {word}."]) if folder == "." else \
        rng.choice([f"Which files in {folder} mention {word}?",
                    f"Search {folder} for {word}."])
    step = coding_step("search", {"pattern": word, "path": folder}, result,
                       f"I will search {folder} for the text {word}.")
    answer = (f"{word} is mentioned in {join_list(where)}." if len(where) > 1 else
              f"{word} is mentioned in {where[0]}.")
    return Task(user, [step], answer, "I have the matches. I will name the files.")


def coding_direct(rng, w):
    task = task_direct(rng, w)
    if task.answer is None or task.user.startswith(("Hello", "Hi", "Good")):
        if task.user.startswith(("Hello", "Hi", "Good")):
            task.answer = ("Hello! I can look at the files in this folder, search them, change "
                           "them and run commands. What would you like to do?")
        else:
            names = [t["function"]["name"] for t in AGENT_CONTRACT["tools"]]
            task.answer = (f"I have {plural(len(names), 'tool')}: {join_list(names)}. They let "
                           f"me read, write, edit, search and list files and run commands.")
    return task


def coding_thanks(rng):
    """A later request that only thanks the agent: it answers without a tool."""
    user = rng.choice(["Thanks.", "Thank you.", "Thanks!", "Great, thanks.", "OK, thank you."])
    answer = rng.choice(["You are welcome. Tell me if you need anything else.",
                         "Glad to help. What would you like to do next?"])
    return Task(user, [], answer, "The user thanks me. No tool is needed; I will reply briefly.",
                needs=[])


# Finding a file and reading it has the most weight: its calls copy both a folder and a file
# name from the request and the listing, the hardest thing the contract asks of the model.
CODING_TASKS = [(coding_list, 18), (coding_read, 18), (coding_list_read, 40),
                (coding_search, 14), (coding_direct, 10)]
# How often a later request of a conversation is only a thank-you.
CODING_THANKS = 0.15


def draw_coding_task(rng, w):
    gen = rng.choices([g for g, _ in CODING_TASKS], [k for _, k in CODING_TASKS])[0]
    return gen(rng, w)


def tool_samples(w, n=40, seed=1):
    """The world's files and the tool calls of n coding transcripts with the results they
    show, for tests/agent/contract_test.cpp to replay against the agent's tools."""
    rng = random.Random(f"magnetar-corpus/{seed}/coding/samples")
    calls = []
    while len(calls) < n:
        for step in draw_coding_task(rng, w).steps:
            calls.append({"name": step.name, "arguments": step.args, "result": step.result})
    return {"files": {p: t for p, (t, _) in w.files.items()}, "calls": calls}


# How many requests one coding conversation holds (weights): the agent keeps one session, so
# later requests see the earlier ones, and the long preamble is shared by several of them.
CODING_ROUNDS = [(1, 40), (2, 35), (3, 25)]


def make_coding(rng, w):
    mode = "think" if rng.random() < 0.7 else "nothink"
    system = AGENT_CONTRACT["preamble"].replace("{workdir}", rng.choice(WORKDIRS))
    if rng.random() < 0.2:
        system += "\n\n" + rng.choice(AGENT_SYSTEMS[2:])
    messages = [{"role": "system", "content": system}]
    rounds = rng.choices([n for n, _ in CODING_ROUNDS], [k for _, k in CODING_ROUNDS])[0]
    calls = 0
    for i in range(rounds):
        task = (coding_thanks(rng) if i > 0 and rng.random() < CODING_THANKS else
                draw_coding_task(rng, w))
        messages.append({"role": "user", "content": task.user})
        for step in task.steps:
            calls += 1
            turn = {"role": "assistant", "content": ""}
            if mode == "think":
                turn["reasoning_content"] = step.think
            turn["tool_calls"] = [{"id": f"call_{calls}", "name": step.name,
                                   "arguments": step.args}]
            messages.append(turn)
            messages.append({"role": "tool", "tool_call_id": f"call_{calls}",
                             "content": step.result})
        final = {"role": "assistant", "content": task.answer}
        if mode == "think":
            final["reasoning_content"] = task.final_think
        messages.append(final)
    return {"mode": mode, "tools": AGENT_CONTRACT["tools"], "messages": messages}


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------

TRAIN_BYTES = 12_000_000
SHARES = {"prose": 0.40, "chat": 0.35, "agent": 0.25, "coding": 0.50}
HELDOUT_FRACTION = 0.03
MIN_DOCS = 8
MAKERS = {"prose": make_prose, "chat": make_chat, "agent": make_agent,
          "coding": make_coding}


def dumps(doc):
    return json.dumps(doc, ensure_ascii=False, sort_keys=False)


def generate(rng, world, kind, target_bytes, avoid=None):
    """Serialised documents of one kind until target_bytes (UTF-8) are reached."""
    lines, total = [], 0
    while total < target_bytes or len(lines) < MIN_DOCS:
        for _ in range(1000):
            line = dumps(MAKERS[kind](rng, world))
            if avoid is None or line not in avoid:
                break
        else:
            raise RuntimeError(f"could not draw a {kind} document unlike the training ones")
        lines.append(line)
        total += len(line.encode("utf-8")) + 1
    return lines


def write_lines(out_dir, name, lines, stats):
    path = os.path.join(out_dir, name)
    data = "".join(line + "\n" for line in lines)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(data)
    size = len(data.encode("utf-8"))
    stats[name] = {"documents": len(lines), "characters": len(data), "bytes": size}
    print(f"{name}: {len(lines)} documents, {size / 1e6:.2f} MB", file=sys.stderr)


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Write the deterministic prose, chat and agent JSONL corpus for the small "
                    "Magnetar demo model.")
    ap.add_argument("--out", help="output directory (created if missing); required unless "
                                "--tool-samples")
    ap.add_argument("--seed", type=int, default=1, help="seed of the world and all text (1)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="size factor; 1.0 gives about 18 MB of training JSONL (1.0)")
    ap.add_argument("--tool-samples", metavar="FILE",
                    help="only write the world's files and sample tool calls of the coding "
                         "transcripts with their results (JSON) to FILE")
    args = ap.parse_args(argv)
    if args.tool_samples:
        with open(args.tool_samples, "w", encoding="utf-8") as f:
            f.write(json.dumps(tool_samples(World(args.seed), seed=args.seed),
                               ensure_ascii=False, indent=1) + "\n")
        return 0
    if not args.out:
        ap.error("--out is required")
    if args.scale <= 0:
        ap.error("--scale must be positive")

    start = time.monotonic()
    os.makedirs(args.out, exist_ok=True)
    world = World(args.seed)
    stats = {}
    for kind, share in SHARES.items():
        target = TRAIN_BYTES * share * args.scale
        train_rng = random.Random(f"magnetar-corpus/{args.seed}/{kind}/train")
        heldout_rng = random.Random(f"magnetar-corpus/{args.seed}/{kind}/heldout")
        train = generate(train_rng, world, kind, target)
        write_lines(args.out, f"{kind}.train.jsonl", train, stats)
        heldout = generate(heldout_rng, world, kind, target * HELDOUT_FRACTION, avoid=set(train))
        write_lines(args.out, f"{kind}.heldout.jsonl", heldout, stats)
        if kind in ("agent", "coding"):
            prompts = [agent_prompt(json.loads(line)) for line in heldout]
            write_lines(args.out, f"{kind}_prompts.heldout.jsonl",
                        [dumps(p) for p in prompts if p is not None], stats)
    summary = {"seed": args.seed, "scale": args.scale, "files": stats}
    with open(os.path.join(args.out, "stats.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(summary, ensure_ascii=False, indent=2) + "\n")
    print(f"stats.json written; {time.monotonic() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
