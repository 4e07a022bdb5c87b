# The agent's side of authentication (issue 6), loaded by main.py only when config.json has a key
# (lwboot checks it and sizes the buffers; this runs after lwboot is unloaded: at 64K the heap
# has no room for auth.py and the boot code at once).
#
# Why a module of its own: every name a module uses (an attribute, a function) is a qstr that stays
# for good, and lwagent and lwboot are loaded on every board. If they named the auth.Endpoint's
# methods and counters themselves, a board with "auth": false would pay for those qstrs too (and
# past a qstr pool's end, for a new 3.6 KB pool: measured, the push sessions then ran out of heap).
# So the endpoint is reached through a list of bound methods made here; lwagent indexes it with
# const() names, which cost nothing.
import time

from leadwire.auth import TO_HOST, Endpoint, Key


def setup(k, ring, links):
    """An endpoint for each link (L[15]) from the key lwboot left in k[15] (then dropped)."""
    key = Key(k[15])
    k[15] = None
    e = ring.epoch
    for L in links:
        L[15] = link(key, (e[0] << 8) | e[1], (e[2] << 8) | e[3])
    g = globals()
    del g["setup"], g["link"]  # boot only: their code goes (hint, rejects stay)


def link(key, hi, lo):
    """One link's auth: [verify, sign_into, device_hello, device_sign_hello, rejects, epoch hi,
    epoch lo, endpoint, hint] (lwagent's _A* indexes). key: an auth.Key (one for all links)."""
    ep = Endpoint(key, TO_HOST)
    last = [time.ticks_add(time.ticks_ms(), -1000)]

    def hint():
        # A refused frame and no session yet: this boot has not met the host. Its polls are for the
        # boot before, so tell it with the boot HELLO (a hint: it starts a handshake at once instead
        # of after its timeouts); at most every 250 ms, so refused frames cannot make a flood.
        now = time.ticks_ms()
        if ep.live or time.ticks_diff(now, last[0]) < 250:
            return 0
        last[0] = now
        return 1

    return [ep.verify, ep.sign_into, ep.device_hello, ep.device_sign_hello, rejects, hi, lo, ep, hint]


def rejects(links, h):
    """The auth rejects of all links into the agent's health list h[12:15]."""
    h[12] = h[13] = h[14] = 0
    for L in links:
        ep = L[15][7]
        h[12] += ep.forged
        h[13] += ep.replayed
        h[14] += ep.unsigned
