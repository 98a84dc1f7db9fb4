#!/usr/bin/env python3
"""A small MCP server over stdio (JSON-RPC 2.0, one message a line), for
loopbox's tests and the conformance cases that run it under both tools.

Tools:
  echo     -> its arguments, as text (isError false)
  fail     -> isError true
  count    -> appends a line to the file named by `path` (relative to the
              working directory) and says how many lines it has: what a
              resumed run must not do twice
  argv     -> the server's own command line, as JSON text
  write    -> writes `text` to `path`; isError with the reason when it cannot
Any other tool name is JSON-RPC error -32601 (method not found).

Hostile behaviours, chosen by the tool name, for loopbox's tests:
  huge     -> one answer line of 8 MiB
  garbage  -> lines that are not JSON, then it closes its output
  silent   -> never answers (and ignores SIGTERM)
  exit     -> exits without answering
  flood    -> notifications without end, never the answer
  pings    -> ping requests with 60 KB ids, never reading what is sent back
              (nor answering, and ignoring SIGTERM)
"""

import json
import os
import signal
import sys
import time


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def answer(req_id, result):
    send({"jsonrpc": "2.0", "id": req_id, "result": result})


def text(t, is_error=False):
    return {"content": [{"type": "text", "text": t}], "isError": is_error}


def call(req_id, name, args):
    if name == "echo":
        answer(req_id, text(json.dumps(args, sort_keys=True)))
    elif name == "fail":
        answer(req_id, text("the tool failed", True))
    elif name == "count":
        path = args.get("path", "count.txt")
        with open(path, "a") as f:
            f.write("called\n")
        with open(path) as f:
            answer(req_id, text(str(len(f.readlines()))))
    elif name == "argv":
        answer(req_id, text(json.dumps(sys.argv[1:])))
    elif name == "write":
        try:
            with open(args["path"], "w") as f:
                f.write(args.get("text", ""))
            answer(req_id, text("written"))
        except OSError as e:
            answer(req_id, text(str(e), True))
    elif name == "huge":
        answer(req_id, text("x" * (8 << 20)))
    elif name == "garbage":
        for _ in range(3):
            sys.stdout.write("this is not json {{{\n")
        sys.stdout.flush()
        os.close(1)
        time.sleep(60)
    elif name == "silent":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(3600)
    elif name == "exit":
        os._exit(3)
    elif name == "pings":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for i in range(8):
            send({"jsonrpc": "2.0", "id": f"{i}-" + "p" * 60000, "method": "ping"})
        time.sleep(3600)
    elif name == "flood":
        while True:
            send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}})
    else:
        send({"jsonrpc": "2.0", "id": req_id,
              "error": {"code": -32601, "message": f"Unknown tool: {name}"}})


def main():
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        method = msg.get("method")
        if method == "initialize":
            answer(msg["id"], {
                "protocolVersion": msg["params"].get("protocolVersion", "2024-11-05"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "loopbox-test-server", "version": "1"},
            })
        elif method == "tools/call":
            p = msg.get("params", {})
            call(msg["id"], p.get("name"), p.get("arguments") or {})
        elif method == "tools/list":
            answer(msg["id"], {"tools": [{"name": n, "inputSchema": {"type": "object"}}
                                         for n in ["echo", "fail", "count"]]})
        elif "id" in msg:
            send({"jsonrpc": "2.0", "id": msg["id"],
                  "error": {"code": -32601, "message": f"Unknown method: {method}"}})


if __name__ == "__main__":
    main()
