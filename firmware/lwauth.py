# The agent's side of authentication, loaded by main.py only when config.json has a key
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

from micropython import const

from leadwire.auth import TO_HOST, Endpoint, Key

# records: the same `_NAME = const(n)` lines as in lwagent and lwboot (tests/firmware/test_records.py)
_KEY = const(15)  # settings: the auth key lwboot read
_EP = const(15)  # a link: the list link() makes (None: auth off)
_FORGED = const(12)  # the health list: auth rejects summed over the links
_REPLAYED = const(13)
_UNSIGNED = const(14)
# the list link() makes (lwagent's _A* indexes)
_AVER = const(0)
_ASIGN = const(1)
_AHELLO = const(2)
_ASHELLO = const(3)
_AREJ = const(4)
_AEH = const(5)
_AEL = const(6)
_AEP = const(7)
_AHINT = const(8)
_NAUTH = const(9)


def setup(k, ring, links):
    """An endpoint for each link (L[_EP]) from the key lwboot left in k[_KEY] (then dropped)."""
    key = Key(k[_KEY])
    k[_KEY] = None
    e = ring._st  # the ring's state: 11, 12 its epoch's halves (ring._SEHI, _SELO)
    for L in links:
        L[_EP] = link(key, e[11], e[12])
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

    A: list = [None] * _NAUTH
    A[_AVER] = ep.verify
    A[_ASIGN] = ep.sign_into
    A[_AHELLO] = ep.device_hello
    A[_ASHELLO] = ep.device_sign_hello
    A[_AREJ] = rejects
    A[_AEH] = hi
    A[_AEL] = lo
    A[_AEP] = ep
    A[_AHINT] = hint
    return A


def rejects(links, h):
    """The auth rejects of all links into the agent's health list h[_FORGED:_UNSIGNED + 1]."""
    h[_FORGED] = h[_REPLAYED] = h[_UNSIGNED] = 0
    for L in links:
        ep = L[_EP][_AEP]
        h[_FORGED] += ep.forged
        h[_REPLAYED] += ep.replayed
        h[_UNSIGNED] += ep.unsigned
