# leadwire device agent entry point (runs at power-on on ESP32 / Pico W; `leadwire board` runs it on
# the unix port). Builds the agent for this board from config.json and runs it under asyncio.
# A bad config or a failed link falls back to safe defaults; a config the agent cannot run on stops
# at the REPL ("not ready": a reset would not help). A task's pass that fails is counted and tried
# again after a back-off (lwagent). An error nothing survives (fatal) is said on the console, then
# the board resets after 10 s (Ctrl-C meanwhile: stay at the REPL; a board module may set RESET_S;
# the unix port, with no machine.reset, ends). Config "wdt": a machine.WDT, started by lwboot once
# the agent is built and fed by the io loop, resets a hung board.
import asyncio
import gc
import sys

if sys.platform == "esp32":
    from boards import esp32 as board
elif sys.platform == "rp2":
    from boards import rp2 as board
else:
    from boards import unix as board


def start():
    del globals()["start"]  # run once (its code stays while main.py runs: kept short)
    gc.collect()
    hold = [bytearray(gc.mem_free() * 2 // 5)]  # one block for the ring, kept from boot's fragments
    import lwboot

    b = lwboot.build(board, hold)  # never raises; None: not ready (no link), said on the console
    del lwboot
    del sys.modules["lwboot"]  # boot-only code: free its heap
    gc.collect()
    if b is None:
        board.led(0)
        return None  # stop at the REPL (never a reset loop)
    import lwagent

    io = lwagent.start(b, board)  # the agent (auth.py with a key) and its tasks
    del lwagent.start  # run once: its code goes (this function's stays while main.py runs)
    gc.collect()
    print("leadwire: ready, heap used %d free %d" % (gc.mem_alloc(), gc.mem_free()))
    return io


try:
    io = start()
    if io is not None:  # None: not ready, said on the console
        asyncio.run(io)
except KeyboardInterrupt:
    print("leadwire: stopped")
except Exception as e:
    import time

    import machine

    t = getattr(board, "RESET_S", 10)
    print("leadwire: agent stopped: %r; reset in %d s" % (e, t))
    time.sleep(t)
    getattr(machine, "reset", sys.exit)()
