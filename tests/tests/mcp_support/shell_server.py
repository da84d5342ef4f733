import json, os, subprocess, sys
def schema(props, req):
    return {"type": "object", "properties": {k: {"type": "string"} for k in props}, "required": req}
TOOLS = [
    {"name": "run_shell", "description": "run a shell command", "inputSchema": schema(["command"], ["command"])},
    {"name": "write_file", "description": "write a file anywhere", "inputSchema": schema(["path", "content"], ["path", "content"])},
    {"name": "read_file", "description": "read a file anywhere", "inputSchema": schema(["path"], ["path"])},
    {"name": "danger", "description": "leaves DANGER-RAN", "inputSchema": schema([], [])},
    {"name": "misbehave", "description": "garbage | stray | crash", "inputSchema": schema(["how"], ["how"])},
    {"name": "ask_client", "description": "send a request to the client, return its answer", "inputSchema": schema(["method"], ["method"])},
]
ASKED = [0]
def ask_client(method):
    ASKED[0] += 1
    rid = "srv-%d" % ASKED[0]
    params = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5} if method == "sampling/createMessage" else {}
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    while True:
        answer = json.loads(sys.stdin.readline())
        if answer.get("id") == rid and "method" not in answer:
            return json.dumps(answer)
def send(m):
    sys.stdout.write(json.dumps(m) + "\n")
    sys.stdout.flush()
def result(i, text, err=False):
    send({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": text}], "isError": err}})
for line in sys.stdin:
    m = json.loads(line)
    i, method = m.get("id"), m.get("method")
    sys.stderr.write("got " + str(method) + "\n")
    sys.stderr.flush()
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": i, "result": {"protocolVersion": m["params"]["protocolVersion"],
              "capabilities": {"tools": {}, "resources": {}, "prompts": {}}, "serverInfo": {"name": "shell", "version": "0"}}})
    elif method == "resources/list":
        send({"jsonrpc": "2.0", "id": i, "result": {"resources": [{"uri": "file:///notes", "name": "notes"}]}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": i, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        name, a = m["params"]["name"], m["params"].get("arguments") or {}
        try:
            if name == "run_shell":
                p = subprocess.run(["sh", "-c", a["command"]], capture_output=True, text=True)
                result(i, p.stdout + p.stderr + "[exit %d]" % p.returncode, p.returncode != 0)
            elif name == "write_file":
                with open(a["path"], "w") as f:
                    f.write(a["content"])
                result(i, "wrote " + a["path"])
            elif name == "read_file":
                with open(a["path"]) as f:
                    result(i, f.read())
            elif name == "ask_client":
                result(i, ask_client(a["method"]))
            elif name == "danger":
                open("DANGER-RAN", "w").close()
                result(i, "ran")
            elif name == "misbehave":
                how = a["how"]
                if how == "garbage":
                    sys.stdout.write("this is not json\n")
                    send({"jsonrpc": "2.0", "id": 424242, "result": {}})
                    result(i, "misbehaved")
                elif how == "crash":
                    os._exit(3)
                elif how == "hang":
                    pass
                elif how == "flood":
                    junk = "x" * 65536
                    for n in range(800):
                        sys.stdout.write(junk)
                    sys.stdout.write("\n")
                    for n in range(2000):
                        send({"jsonrpc": "2.0", "method": "notifications/message",
                              "params": {"level": "info", "data": "flood %d" % n}})
                    result(i, "flooded")
            else:
                send({"jsonrpc": "2.0", "id": i, "error": {"code": -32602, "message": "unknown tool " + name}})
        except Exception as e:
            result(i, "%s: %s" % (type(e).__name__, e), True)
    elif i is not None:
        send({"jsonrpc": "2.0", "id": i, "error": {"code": -32601, "message": "unknown method"}})
