# The raw UDP baseline of bench/goodput_bench.py, run on the MicroPython unix port with the boards'
# heap: datagrams of SIZE bytes sent as fast as one loop can to HOST:PORT for SECONDS.
#
#     micropython -X heapsize=64K goodput_raw.py HOST PORT SIZE SECONDS
#
# No protocol, no ring, no allocation in the loop: one preallocated buffer, one sendto() per
# datagram. A send the kernel refuses (ENOBUFS, EAGAIN) is counted and the loop goes on. Prints one
# JSON line: datagrams sent, refused, and the seconds the loop ran.
import json
import socket
import sys
import time


def main():
    host, port, size, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    addr = socket.getaddrinfo(host, port)[0][-1]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    buf = bytearray(size)
    for i in range(size):
        buf[i] = i & 0xFF
    sent = 0
    refused = 0
    t0 = time.ticks_ms()
    end = time.ticks_add(t0, int(seconds * 1000))
    print(json.dumps({"ready": 1}))
    while time.ticks_diff(end, time.ticks_ms()) > 0:
        n = 0
        while n < 256:  # the clock is read once per 256 datagrams
            try:
                s.sendto(buf, addr)
                sent += 1
            except OSError:
                refused += 1
            n += 1
    ms = time.ticks_diff(time.ticks_ms(), t0)
    s.close()
    print(json.dumps({"sent": sent, "refused": refused, "ms": ms}))


main()
