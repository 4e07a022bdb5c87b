# leadwire device agent entry point (runs at power-on on ESP32 / Pico W; `leadwire board` runs it on
# the unix port). Builds the agent for this board from config.json and runs it under asyncio.
# Nothing here resets the board: a bad config or a failed link falls back to safe defaults, and an
# unexpected failure stops at the REPL with a message, never in a crash loop.
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
    k, ring, sensors, links, tasks = b
    if k[15]:  # a key (issue 6): auth.py and an endpoint per link, where the boot code was
        import lwauth

        lwauth.setup(k, ring, links)
    from lwagent import Agent

    ag = Agent(k, ring, sensors, links, board)
    tasks.append(ag.sources())
    ag.tasks = [asyncio.create_task(t) for t in tasks]  # kept: the scheduler holds weak references
    board.led(1)
    gc.collect()
    gc.threshold(4096)  # collect after 4 KB of garbage: bounds the low-water's dip
    print("leadwire: ready, heap used %d free %d" % (gc.mem_alloc(), gc.mem_free()))
    return ag.io()


try:
    io = start()
    if io is not None:  # None: not ready, said on the console
        asyncio.run(io)
except KeyboardInterrupt:
    print("leadwire: stopped")
except Exception as e:
    print("leadwire: agent stopped: %r" % (e,))
