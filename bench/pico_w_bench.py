"""The agent on an emulated Raspberry Pi Pico W over Wi-Fi, beside the same board over UART0.

    .venv/bin/python bench/pico_w_bench.py [--seconds 20] [--json]

The board is the official MicroPython v1.26.1 RPI_PICO_W firmware on rp2040js with an emulated
CYW43439 and access point (tools/pico, `leadwire board --kind pico-w`), flashed with `leadwire
flash --board rp2` as a real Pico W. Figures are on the board's clock (rp2040js counts the CPU's
cycles at 125 MHz): host load only slows the run in wall time. The emulated radio has no airtime:
a frame costs the board what the driver and lwIP spend on it (gSPI transfers by PIO and DMA
included), not the 802.11 medium, so the Wi-Fi figure is the board's ceiling, not a real link's.

1. Acknowledged 64-byte events per second of the board's clock (stored by the real bridge,
   host/bridge unchanged, pipelined burst POLLs): over Wi-Fi UDP (1472-byte frames) and over UART0
   at 921,600 baud (2059-byte frames: bench/pico_bench.py's run), the sensor offering more than
   either carries; the ratio UDP / UART.
2. CPU cycles per acknowledged event on the UDP path (the whole board: asyncio loop, sensor,
   answers, lwIP, the CYW43 driver).
3. Free heap with Wi-Fi up and auth on (a random key, a signing client polling over UDP): after
   boot ("leadwire: ready") and the lowest the health records show under load.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

import click

from leadwire.tools.benchbridge import bridge_doc
from leadwire.tools.board import PICO_W_KEY, PICO_W_SSID, PicoBoard, pico_files, pico_missing
from leadwire.tools.picobench import FRAME, bridge_run, goodput, goodput_config, heap_auth, log
from leadwire.tools.picohil import configure, flashed_pico

UDP_FRAME = 1472  # the largest UDP frame the agent takes (one Ethernet MTU)
UDP_OFFER = 6000  # events/s the sensor offers over Wi-Fi: more than the board's CPU answers
WLAN = {"ssid": PICO_W_SSID, "key": PICO_W_KEY}
NET = {**WLAN, "port": 4210}


def udp_goodput(board: PicoBoard, tmp: Path, warmup: float, seconds: float, hz: int) -> dict[str, Any]:
    """Section 1 and 2 over Wi-Fi: the bridge polling the board's UDP port through the AP's NAT."""
    cfg = goodput_config(hz, serial=False, udp={"port": NET["port"], "frame": UDP_FRAME}, wlan=WLAN)
    configure(board, cfg, timeout=120)
    assert board.address is not None
    # the bridge's timeouts are wall time: the emulator runs at ~0.3x when busy
    doc = bridge_doc(tmp / "goodput-udp.db", {"udp": "%s:%d" % board.address}, UDP_FRAME - 24, 1.0)
    doc["polling"]["pipeline"] = True
    r = {"link": "udp", "frame": UDP_FRAME, "hz": hz, **bridge_run(board, doc, warmup, seconds)}
    r["events_per_s"] = r["stored"] / r["board_s"]
    log("pico_w_bench: udp: %s" % json.dumps({k: r[k] for k in ("stored", "events_per_s", "busy")}))
    return r


def report(fw: str, udp: dict[str, Any], uart: dict[str, Any], heap: dict[str, Any]) -> str:
    cpe = udp["cycles_per_event"]
    return "\n".join(
        [
            "",
            "emulated Pico W, firmware %s" % fw,
            "",
            "| link | frame B | offered ev/s | board s | acknowledged | lost (counted) | events/s | CPU busy "
            "| cycles per event |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        + [
            "| %s | %d | %d | %.1f | %d | %d | %.0f | %.2f | %s |"
            % (
                name,
                g["frame"],
                g["hz"],
                g["board_s"],
                g["stored"],
                g["lost"],
                g["events_per_s"],
                g["busy"],
                "%.0f" % g["cycles_per_event"] if g["cycles_per_event"] else "-",
            )
            for name, g in (("Wi-Fi UDP", udp), ("UART0 921,600 baud", uart))
        ]
        + [
            "",
            "UDP / UART0: %.2fx events/s; UDP path %s cycles per event"
            % (udp["events_per_s"] / max(uart["events_per_s"], 1e-9), "%.0f" % cpe if cpe else "-"),
            "heap with Wi-Fi up and auth on: %d B free after boot, lowest %s B free under load (low-water %s)"
            % (heap["free_after_boot"], heap["heap_free_min"], heap["low_water"]),
        ]
    )


@click.command()
@click.option("--seconds", default=20.0, show_default=True, help="Measurement window per link (wall s).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout instead of the tables.")
def main(seconds: float, as_json: bool) -> None:
    why = pico_missing(wifi=True)
    if why:
        raise click.ClickException(why)
    uf2 = pico_files(wifi=True)[0]
    fw = "%s sha256 %s" % (uf2.name, hashlib.sha256(uf2.read_bytes()).hexdigest())
    with tempfile.TemporaryDirectory(prefix="pico-w-bench-") as tmp:
        board = flashed_pico(Path(tmp) / "board", {"id": "bench", "wlan": WLAN}, NET)
        try:
            udp = udp_goodput(board, Path(tmp), 4.0, seconds, UDP_OFFER)
            uart_raw = goodput(board, Path(tmp), 921600, 4.0, seconds, 1.2, FRAME)
            uart = {
                **uart_raw,
                "link": "uart0",
                "events_per_s": uart_raw["stored"] / uart_raw["board_s"],
            }
            heap = heap_auth(
                board, min(seconds, 10.0), {"wlan": WLAN, "udp": {"port": NET["port"], "frame": 256}}
            )
        finally:
            board.close()
    out = {
        "firmware": fw,
        "udp_events_per_s": udp["events_per_s"],
        "uart0_921600_events_per_s": uart["events_per_s"],
        "udp_over_uart0": udp["events_per_s"] / uart["events_per_s"] if uart["events_per_s"] else None,
        "udp_cycles_per_event": udp["cycles_per_event"],
        "heap_free_wifi_auth_boot": heap["free_after_boot"],
        "heap_free_wifi_auth_min": heap["heap_free_min"],
        "heap_low_water_wifi_auth": heap["low_water"],
        "udp": udp,
        "uart0": uart,
        "heap": heap,
    }
    if as_json:
        print(json.dumps(out))
    else:
        print(report(fw, udp, uart, heap))


if __name__ == "__main__":
    main()
