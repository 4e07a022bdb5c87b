# Events from an interrupt handler (machine.Timer, Pin.irq): the handler takes a buffer, fills it
# and posts it; an asyncio task of the agent's writes the posted buffers into the ring, in order.
#
#     e = lwirq.Emitter(agent, 4, 2)      # channel 4, 2-byte readings, 4 buffers (the default)
#     adc = machine.ADC(4)
#
#     def tick(t):                        # a hard or soft IRQ: nothing here allocates
#         b = e.buffer()                  # a free buffer, or None (all posted, none written yet)
#         if b is not None:
#             v = adc.read_u16()
#             b[0] = v >> 8
#             b[1] = v & 0xFF
#             e.post()
#
#     machine.Timer(period=100, callback=tick)
#
# Why a task and not micropython.schedule: a scheduled callback runs between any two bytecodes of
# the main program, so it could write the ring in the middle of the agent's own ring write or
# answer; asyncio.ThreadSafeFlag is set from the handler (allowed in a hard IRQ, no allocation)
# and wakes the task at its next turn, between two of the agent's steps.
#
# The buffers are a single-producer single-consumer queue: the handler moves only `w`, the task
# only `r` (indices mod 2 x depth, small ints): no lock, no allocation on either side. A reading
# that finds every buffer posted and not yet written is counted in `missed`, not queued.
import asyncio


class Emitter:
    def __init__(self, agent, channel, size, depth=4):
        self.agent = agent
        self.ch = channel
        self.size = size
        self.bufs = [bytearray(size) for _ in range(depth)]
        self.depth = depth
        self.w = 0  # posted (mod 2 x depth): the handler's
        self.r = 0  # written into the ring (mod 2 x depth): the task's
        self.missed = 0
        self.flag = asyncio.ThreadSafeFlag()
        agent.channel(channel)
        agent.tasks.append(asyncio.create_task(self._drain()))

    def buffer(self):
        """The next free buffer for the handler to fill, or None (all posted; counted in missed)."""
        d = self.depth
        if (self.w - self.r) % (d + d) == d:
            self.missed += 1
            return None
        return self.bufs[self.w % d]

    def post(self):
        """The buffer buffer() gave is filled: it goes into the ring, after those posted before."""
        self.w = (self.w + 1) % (self.depth + self.depth)
        self.flag.set()

    async def _drain(self):
        ag = self.agent
        d = self.depth
        while True:
            await self.flag.wait()
            while self.r != self.w:
                ag.emit(self.ch, self.bufs[self.r % d], self.size)
                self.r = (self.r + 1) % (d + d)
