# The agent as a library for the board's own application (docs/firmware.md, "Writing your
# application"). The default main.py is `lwapp.run()`: the agent alone. An application's main.py
# passes its own coroutine, run beside the agent's tasks:
#
#     import lwapp
#
#     async def app(agent):
#         agent.channel(3)  # a channel of its own (a SUBSCRIBE may name it)
#         buf = bytearray(2)
#         while True:
#             ...           # fill buf
#             agent.emit(3, buf, 2)  # into the ring: 0 bytes allocated
#             await asyncio.sleep_ms(1000)
#
#     lwapp.run(app)
#
# What an application may call on the agent (lwagent.Agent): emit(channel, buf, n) -- one event,
# buf[:n] copied into the ring (and into the report of a push session on that channel), 0 bytes,
# from any task; alarm(code, value) -- an alarm record on the alarm channel (pushed at once to a
# session on it, spec 002); channel(ch) -- declare a channel of its own. From an interrupt
# (machine.Timer, Pin.irq): lwirq.Emitter.
#
# Boot (start): config.json -> the agent (lwboot, unloaded once built), its tasks created; an
# error nothing survives resets the board after 10 s (Ctrl-C meanwhile: stay at the REPL; a board
# module may set RESET_S; the unix port, with no machine.reset, ends).
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
    """The agent for this board, built from config.json with its tasks created (asyncio.run
    (agent.io()) serves its links), or None: not ready (said on the console). Once per boot."""
    del globals()["start"]  # run once: its code goes
    gc.collect()
    # one block for the ring, kept from boot's fragments; the boot up to the ring runs in the rest,
    # which on a 64 KB unix board must be more than 3/5 of the free heap (tests/firmware/test_boot)
    hold = [bytearray(gc.mem_free() * 3 // 8)]
    import lwboot

    b = lwboot.build(board, hold)  # never raises; None: not ready (no link), said on the console
    del lwboot
    del sys.modules["lwboot"]  # boot-only code: free its heap
    gc.collect()
    if b is None:
        board.led(0)
        return None  # stop at the REPL (never a reset loop)
    import lwagent

    ag = lwagent.start(b, board)  # the agent (auth.py with a key) and its tasks
    del lwagent.start  # run once: its code goes
    gc.collect()
    print("leadwire: ready, heap used %d free %d" % (gc.mem_alloc(), gc.mem_free()))
    return ag


def run(f=None):
    """Start the agent and serve its links for good; f: the application, a coroutine function
    f(agent) run as a task beside the agent's (its failure is said on the console; the agent goes
    on)."""
    try:
        ag = start()
        if ag is not None:  # None: not ready, said on the console
            if f is not None:
                ag.tasks.append(asyncio.create_task(f(ag)))
            asyncio.run(ag.io())
    except KeyboardInterrupt:
        print("leadwire: stopped")
    except Exception as e:
        import time

        import machine

        t = getattr(board, "RESET_S", 10)
        print("leadwire: agent stopped: %r; reset in %d s" % (e, t))
        time.sleep(t)
        getattr(machine, "reset", sys.exit)()
