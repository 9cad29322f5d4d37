"""A package index in miniature for the sync tests: files served over HTTP on 127.0.0.1 from a dict
(path -> bytes), with HEAD and byte ranges as a real index serves wheels, and every byte and range
sent counted, so a test can prove a wheel was read in part and never downloaded."""

from __future__ import annotations

import http.server
import threading


class RangeServer:
    def __init__(self, files: dict[str, bytes] | None = None):
        self.files: dict[str, bytes] = files if files is not None else {}
        self.sent = 0
        self.ranges = 0
        self.no_ranges = False          # True: ignore Range and send no Accept-Ranges
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, head: bool):
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                rng = self.headers.get("Range")
                status, start, end = 200, 0, len(body) - 1
                if rng and rng.startswith("bytes=") and not server.no_ranges:
                    a, b = rng[6:].split("-")
                    start, end, status = int(a), min(int(b), len(body) - 1), 206
                    server.ranges += 1
                chunk = body[start:end + 1]
                self.send_response(status)
                self.send_header("Content-Type", "text/html" if self.path.endswith("/")
                                 else "application/octet-stream")
                if not server.no_ranges:
                    self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(len(body) if head else len(chunk)))
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
                self.end_headers()
                if not head:
                    server.sent += len(chunk)
                    self.wfile.write(chunk)

            def do_GET(self):
                self._send(False)

            def do_HEAD(self):
                self._send(True)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
