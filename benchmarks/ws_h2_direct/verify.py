#!/usr/bin/env python3
"""Checks that each ws_h2_direct server echoes binary messages byte for byte (the load
generator reads only frame headers): 100 B, 70 kB and 300 kB payloads, within the servers'
HTTP/2 windows, with ws_bench.py's handshakes and framing.

    python3 benchmarks/ws_h2_direct/verify.py [BINARY]
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import ws_bench as wb  # noqa: E402

binary = sys.argv[1] if len(sys.argv) > 1 else "/work/target-ws2/release/ws_h2_direct"
failed = 0
for mode in ["h1", "hyper", "direct"]:
    proc = subprocess.Popen(
        [binary, "--mode", mode, "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    port = int(proc.stdout.readline().split()[-1])
    try:
        for size in (100, 70000, 300000):
            payload = os.urandom(size)
            frame = wb.client_frame(0x2, payload)
            if mode == "h1":
                sock, rest = wb.handshake(port)
                sock.setblocking(True)
                sock.sendall(frame)
                got = rest
                hl = 2 if size < 126 else 4 if size < 65536 else 10
                while len(got) < hl + size:
                    got += sock.recv(1 << 16)
                body = got[hl:]
            else:
                sock, rest, window, conn_window, max_frame = wb.h2_handshake(port)
                sock.setblocking(True)
                sock.sendall(b"".join(f for f, _ in wb.h2_data_frames(frame, max_frame)))
                c = wb.Conn(sock)
                c.h2buf = rest
                ws = b""
                hl = 2 if size < 126 else 4 if size < 65536 else 10
                while len(ws) < hl + size:
                    data, reply = wb.h2_unwrap(c, sock.recv(1 << 16))
                    ws += data
                body = ws[hl:]
            ok = body == payload
            failed += not ok
            print(mode, size, "ok" if ok else "MISMATCH", len(body))
            sock.close()
    finally:
        proc.terminate()
        proc.wait()
sys.exit(1 if failed else 0)
