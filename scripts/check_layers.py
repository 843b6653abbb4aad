#!/usr/bin/env python3
"""Checks the library layering of src/ against the build (run by CTest, test `layers`).

1. The link graph of the project's libraries (target_link_libraries in the CMake files) has no
   cycle.
2. Every #include "dir/..." of a file under src/ names a header of its own library or of a
   library it links (directly or through others). Headers under include/magnetar/ (the public
   API's vocabulary) may be included from anywhere.
3. Every #include "dir/..." of a file under tools/ names a header of include/magnetar/, of
   tools/, or one that its library exports to tools (magnetar_tool_headers(...) in the CMake
   files) - every other src/ header is private - and the tool's target links that library.

Library folders come from magnetar_library(name folder) calls plus the libraries whose sources
are listed by hand (SPECIAL below). Exit status 1 with one line per problem.
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))

# Libraries whose sources are not a magnetar_library() folder: target -> folder.
SPECIAL = {
    "magnetar_cpu_simd": "src/backend/cpu/simd",
    "magnetar_backend_cuda": "src/backend/cuda",
}
# Folders that belong to the library of a parent folder (extra sources added by hand).
MERGED = {"src/backend/cpu/ref": "src/backend/cpu"}
# The target each tools/ folder's sources are compiled into.
TOOL_TARGETS = {
    "tools/cli": "magnetar",
    "tools/server": "magnetar_server",
    "tools/gen-model": "magnetar_genmodel",
    "tools/quantize": "magnetar_quantize_tool",
    "tools/eval": "magnetar_eval_tool",
    "tools/cuda-bench": "magnetar_cuda_bench",
    "tools/agent": "magnetar_agent",
}


def cmake_text():
    out = []
    for base, _, files in os.walk(ROOT):
        if "/build" in base[len(ROOT):] or "/node_modules" in base:
            continue
        for f in files:
            if f == "CMakeLists.txt":
                with open(os.path.join(base, f)) as fh:
                    out.append(re.sub(r"#[^\n]*", "", fh.read()))
    return "\n".join(out)


def main():
    text = cmake_text()
    folders = {}  # folder -> target
    for name, folder in re.findall(r"magnetar_library\(\s*(\w+)\s+([\w/]+)\s*\)", text):
        if name != "name":
            folders[folder] = name
    for target, folder in SPECIAL.items():
        folders[folder] = target
    targets = set(folders.values())
    links = {t: set() for t in targets | set(TOOL_TARGETS.values())}
    for target, body in re.findall(r"target_link_libraries\(\s*(\w+)\s+([^)]*)\)", text):
        if target not in links:
            continue
        for item in body.split():
            if item in links and item != target:
                links[target].add(item)
    exported = {}  # header -> library
    for target, body in re.findall(r"magnetar_tool_headers\(\s*(\w+)\s+([^)]*)\)", text):
        if target == "name":
            continue
        for h in body.split():
            exported[h] = target

    problems = []
    # 1. No cycle.
    state = {}

    def visit(t, stack):
        if state.get(t) == 1:
            problems.append("link cycle: " + " -> ".join(stack[stack.index(t):] + [t]))
            return
        if state.get(t) == 2:
            return
        state[t] = 1
        for u in sorted(links[t]):
            visit(u, stack + [t])
        state[t] = 2

    for t in sorted(links):
        visit(t, [])

    reach = {}

    def reachable(t):
        if t not in reach:
            reach[t] = set()
            for u in links[t]:
                reach[t] |= {u} | reachable(u)
        return reach[t]

    def library_of(rel_dir):
        rel_dir = MERGED.get(rel_dir, rel_dir)
        while rel_dir and rel_dir not in folders:
            rel_dir = os.path.dirname(rel_dir)
        return folders.get(rel_dir)

    # 2. Includes follow the links.
    src = os.path.join(ROOT, "src")
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    for base, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith((".h", ".cpp", ".cu", ".cuh")):
                continue
            path = os.path.join(base, f)
            rel = os.path.relpath(path, ROOT)
            lib = library_of(os.path.dirname(rel))
            if lib is None:
                problems.append(f"{rel}: in no library folder")
                continue
            with open(path, errors="replace") as fh:
                body = fh.read()
            for h in inc.findall(body):
                if h.startswith("magnetar/"):
                    continue
                target_path = os.path.join("src", h)
                if not os.path.exists(os.path.join(ROOT, target_path)):
                    continue  # a system or generated header
                owner = library_of(os.path.dirname(target_path))
                if owner is None or owner == lib or owner in reachable(lib):
                    continue
                problems.append(f"{rel}: includes {h} of {owner}, which {lib} does not link")
    # 3. Tools include public, tool-facing or their own headers, of libraries they link.
    for h, lib in sorted(exported.items()):
        if not os.path.exists(os.path.join(ROOT, "src", h)):
            problems.append(f"magnetar_tool_headers({lib}): {h} does not exist")
        elif library_of(os.path.dirname(os.path.join("src", h))) != lib:
            problems.append(f"magnetar_tool_headers({lib}): {h} belongs to another library")
    n_tool_files = 0
    for entry in sorted(os.listdir(os.path.join(ROOT, "tools"))):
        if os.path.isdir(os.path.join(ROOT, "tools", entry)) and f"tools/{entry}" not in TOOL_TARGETS:
            problems.append(f"tools/{entry}: not in check_layers.py's TOOL_TARGETS (its target "
                            f"is not checked)")
    for folder, tool in sorted(TOOL_TARGETS.items()):
        for base, _, files in os.walk(os.path.join(ROOT, folder)):
            for f in sorted(files):
                if not f.endswith((".h", ".cpp", ".cu", ".cuh")):
                    continue
                n_tool_files += 1
                path = os.path.join(base, f)
                rel = os.path.relpath(path, ROOT)
                with open(path, errors="replace") as fh:
                    body = fh.read()
                for h in inc.findall(body):
                    if h.startswith("magnetar/") or os.path.exists(os.path.join(ROOT, "tools", h)):
                        continue
                    if not os.path.exists(os.path.join(ROOT, "src", h)):
                        continue  # a system or generated header
                    owner = library_of(os.path.dirname(os.path.join("src", h)))
                    if h not in exported:
                        problems.append(f"{rel}: includes {h}, private to {owner} "
                                        f"(not in its magnetar_tool_headers)")
                    elif owner not in reachable(tool):
                        problems.append(f"{rel}: includes {h} of {owner}, which {tool} does not link")
    for p in problems:
        print("layers: " + p)
    if not problems:
        print(f"layers: {len(targets)} libraries, no link cycle, every src/ include follows the "
              f"links; {n_tool_files} tool files include only public, tool-facing "
              f"({len(exported)} headers) or tool headers of libraries they link")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
