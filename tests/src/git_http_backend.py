# One request of git's smart HTTP protocol, answered by `git http-backend`
# (CGI): the test hosts' git servers (network_git.rs, secrets.rs) prepend
# this to their own script.
import os, subprocess, urllib.parse
def git_http_backend(handler, method, path, repos, user):
    u = urllib.parse.urlsplit(path)
    n = int(handler.headers.get("Content-Length") or 0)
    body = handler.rfile.read(n) if n else b""
    env = dict(os.environ, GIT_PROJECT_ROOT=repos, GIT_HTTP_EXPORT_ALL="1", PATH_INFO=u.path,
               QUERY_STRING=u.query, REQUEST_METHOD=method, REMOTE_USER=user, REMOTE_ADDR="192.0.2.1",
               CONTENT_TYPE=handler.headers.get("Content-Type") or "", CONTENT_LENGTH=str(len(body)),
               HTTP_CONTENT_ENCODING=handler.headers.get("Content-Encoding") or "")
    out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
    head, _, rest = out.partition(b"\r\n\r\n")
    status, hs = 200, []
    for line in head.split(b"\r\n"):
        k, _, v = line.decode().partition(": ")
        if k.lower() == "status":
            status = int(v.split()[0])
        elif k:
            hs.append((k, v))
    handler.send_response(status)
    for k, v in hs:
        handler.send_header(k, v)
    handler.send_header("Content-Length", str(len(rest)))
    handler.end_headers()
    handler.wfile.write(rest)
