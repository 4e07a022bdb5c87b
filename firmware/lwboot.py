# Boot: read config.json and check it value by value (a bad or missing value is reported on the
# console and replaced by its safe default: never raised), count the boot, open the links, build
# the HELLO. main.py unloads this module once the agent is built.
#
# Memory: the interpreter keeps every short string literal and every name it loads as a qstr for
# good, even after this module is unloaded. So the config keys and defaults live in long strings
# (never interned) split at run time, the records are lists indexed by const() names (which cost
# nothing), and the functions and their arguments are named with names a board has anyway (the
# agent's, the core's, the interpreter's own: read, check, network, ring, bind, key; io, buf, dest,
# serial): a new name here is one more qstr for good (tests/firmware/test_qstr_budget.py).
from micropython import const

# -- records (lists indexed by these names): the same `_NAME = const(n)` lines in every module that
# indexes them; tests/firmware/test_records.py fails if two files disagree
# the settings, k: SPEC's first part in its order, then the boot count, the key and the watchdog
_RING = const(0)  # ring capacity (events)
_SLOT = const(1)  # slot size: the largest event payload
_HCH = const(3)  # health channel
_ACH = const(5)  # alarm channel
_RBYTES = const(10)  # report body bytes
_NBOOT = const(14)  # the boot count
_KEY = const(15)  # the auth key (bytes; None: auth off), dropped by lwauth.setup
_WDT = const(16)  # the watchdog's timeout in ms (0: off), then the machine.WDT (None: off)
# a link (built by link() below; lwagent's slots)
_IO = const(0)
_UDP = const(1)
_TX = const(2)
_MV = const(3)
_Q = const(4)
_GAP = const(5)
_NEXT = const(6)
_SUBS = const(7)
_OWN = const(8)
_RAW = const(9)
_PEER = const(10)
_HELLO = const(11)
_RB = const(12)
_CB = const(13)
_DEC = const(14)
_EP = const(15)
_LIM = const(16)
_LASTP = const(17)
_NLINK = const(18)  # slots in a link
# a sensor (built in _attempt): channel, period us, size, due (ticks_us), sample number, payload,
# reader (None: synthetic; else lwsrc's, for a config-declared source)
_SCH = const(0)
_SPER = const(1)
_SSIZE = const(2)
_SDUE = const(3)
_SNUM = const(4)
_SBUF = const(5)
_SREAD = const(6)
_NSENSOR = const(7)
# this module's own: the boot's state st, kept across the attempts (read() adds all but the first)
_STHOLD = const(0)  # main.py's list holding the block the ring takes
_STCONF = const(1)  # config.json as read ({} when missing or bad)
_STBOOT = const(2)  # the boot count
_STKEY = const(3)  # the auth key (bytes), None (auth off), or why not ready (str)
# a link's settings (settings()): config key, its object, port, frame size, gap
_LKEY = const(0)
_LCONF = const(1)
_LPORT = const(2)
_LFRAME = const(3)
_LGAP = const(4)
# SPEC's parts (SPEC[n])
_SPSET = const(0)
_SPUDP = const(1)
_SPSER = const(2)
_SPSENSOR = const(3)
_SPCONFIG = const(4)
_SPFW = const(5)
_SPKEYS = const(6)
_SPSENSORS = const(7)
_SPTIER = const(8)  # 8 + tier: said after a failed attempt (tier 2: giving up)
_SPNOKEY = const(11)
_SPWDT = const(12)
_SPBIND = const(13)
# config.json's keys (key(n))
_CID = const(0)
_CSENS = const(1)
_CUDP = const(2)
_CSER = const(3)
_CWLAN = const(4)
_CBIND = const(5)
_CHOST = const(6)
_CKEY = const(7)
_CAUTH = const(8)
_CADC = const(9)  # a sensor entry's keys that declare a real source (lwsrc): adc, i2c, call
_CCALL = const(11)
_CSRC = const(12)  # (not a key: lwsrc's module name, a string here so that a board without a real
# source interns no name for it)
# frame sizes (leadwire.wire; test_records checks them)
_OVERHEAD = const(12)  # wire.OVERHEAD: header and CRC
_AUTH_SIZE = const(8)  # wire.AUTH_SIZE: the trailer of a signed frame

# "path default low high" -- settings in lwagent's order (0 ring capacity, 1 slot size, 2 tick ms,
# 3 health channel, 4 health period ms, 5 alarm channel, 6 alarm priority, 7 periodic alarm ms,
# 8 min ms between bad-frame alarms, 9 report period ms, 10 report body bytes, 11 ACK timeout ms,
# 12 report priority, 13 close priority), then the link and sensor settings
SPEC = (
    "ring 256 1 4096,slot 16 8 512,tick 1 0 100,health.ch 8 0 255,health.ms 5000 0 3600000,"
    "alarm.ch 9 0 255,alarm.prio 7 0 15,alarm.ms 0 0 3600000,alarm.gap 1000 0 60000,"
    "report.ms 250 0 60000,report.bytes 512 64 4096,report.timeout 1000 10 60000,"
    "report.prio 0 0 15,report.close 3 0 15"
    "|port 4210 1 65535,frame 1024 64 1472,gap 0 0 1000"  # udp
    "|port 0 0 0,frame 256 64 2059,gap 0 0 1000"  # serial
    "|ch 1 0 255,hz 10 0 1000000,size 16 2 512"  # a sensor (hz 0: as fast as it can)
    "|config.json|0.1.0|id sensors udp serial wlan bind host key auth adc i2c call lwsrc"
    "|1 10 16 2 2 12"  # default sensors
    "|starting again on safe defaults (links, id and wlan kept from config.json)"  # after a failure
    "|starting again on safe defaults without config.json|giving up"
    '|authentication needs "key" (32..128 hex digits) or "auth": false'  # no key, no "auth": false
    "|wdt 0 0 8388"  # the watchdog's timeout in ms (0: off; 8388: rp2's longest)
    "|127.0.0.1 0.0.0.0"  # a UDP link's bind address: a virtual board's, a board's
)


def build(board, hold=None):
    """config.json -> (settings, ring, sensors, links, extra tasks), or None when the agent cannot
    run (no link, or every attempt failed: said on the console in a line starting "leadwire: not
    ready"). Never raises: an attempt that fails is reported and followed by one on safe defaults:
    tier 1 keeps only the config's links, id and wlan, tier 2 nothing of it. The config and the
    boot count are read once: a retry reads neither file again. A failed attempt closes every
    link it opened first, so the next one finds its ports free. hold: main.py's list holding a
    block taken before the boot fragmented the heap, released for the ring.

    Authentication is decided once, from the config as read, whatever the tier (a fallback never
    turns it off): "auth": false -> off; a valid "key" -> on; no key, or a bad one -> not ready
    ("leadwire: not ready: no key" / "bad key"), said without any key material."""
    global SPEC
    # the core modules first: loaded before the config and the boot fragment the heap beside
    # main.py's block (later, a 64K heap may have no 272-byte hole left for them)
    from leadwire._compat import random_u32  # noqa: F401 (ring() uses it)
    from leadwire.device import hello_into  # noqa: F401 (_attempt uses it)
    from leadwire.framing import StreamDecoder  # noqa: F401 (ring() uses it)
    from leadwire.ring import EventRing  # noqa: F401 (ring() uses it)

    # SPEC split once, here: before the ring (the garbage of splits after it would scatter what
    # stays among the block the ring leaves free: a retry's ring might find no room)
    if type(SPEC) is str:
        SPEC = SPEC.split("|")  # type: ignore[assignment]
        SPEC[_SPKEYS] = SPEC[_SPKEYS].split()  # type: ignore[index]
    st: list = [hold]  # the boot's state (_ST* slots): the rest added by read() on the first attempt
    for tier in range(3):
        try:
            b = _attempt(board, st, tier)
            break
        except Exception as e:  # report anything, then try again on safe defaults
            b = None
            if st[_STHOLD]:
                st[_STHOLD].pop()  # main.py's block, if the failure came before the ring took it
            print("boot: %r; %s" % (e, SPEC[_SPTIER + tier]))
    if isinstance(b, str):  # no key or a bad key: nothing may reach the agent unauthenticated
        print("leadwire: not ready: %s; fix config.json and reset" % b)
        return None
    if b is None or not b[3]:  # (b[3]: the links)
        # nothing could reach the agent: say so and stop (the REPL on a board; the launcher
        # reports it as a failure) rather than claim to be ready, or reset in a loop
        print("leadwire: not ready: %s; fix config.json and reset" % ("no link" if b else "boot failed"))
        return None
    k = b[0]
    if k[_WDT]:  # config "wdt": the watchdog, from here on (a WLAN join at boot may outlast it)
        try:
            import machine

            k[_WDT] = machine.WDT(timeout=k[_WDT])  # lwagent's io loop feeds it
        except Exception as e:  # the unix port has none
            print("wdt: %r; off" % (e,))
            k[_WDT] = None
    return b


def _attempt(board, st, tier):
    # One attempt at the given tier -> build()'s result, or why the agent must not start (str)
    from leadwire.device import hello_into

    if len(st) == 1:
        read(st)  # the first attempt: the config, the boot count and the auth choice, once
    if type(st[_STKEY]) is str:
        return st[_STKEY]
    ax = _AUTH_SIZE if st[_STKEY] else 0  # the trailer of a signed frame
    d, k, lk, sk = check(st[_STCONF], tier)
    # The radio first, when a UDP link needs one: ESP32's RNG is only pseudo-random until it runs,
    # and the free heap measured below must not count the IDF RAM Wi-Fi takes when it starts.
    # net: the station, None (no ssid: no UDP), or what bringing it up raised (said per link)
    net = w = None
    if board.KIND != "unix" and [x for x in lk if x[_LKEY] == key(_CUDP)]:
        net, w = network(board, d)
    r, epoch, buf, serial = ring(board, st, k, lk, sk)
    sensors = []
    for ch, hz, size, c in sk:
        if size > k[_SLOT]:
            print("config: sensor on channel %d: size above slot %d; skipped" % (ch, k[_SLOT]))
            continue
        b = bytearray(size)
        for i in range(2, size):
            b[i] = ch
        s: list = [None] * _NSENSOR
        s[_SCH] = ch
        s[_SPER] = 1000000 // hz if hz else 0
        s[_SSIZE] = size
        s[_SDUE] = s[_SNUM] = 0
        s[_SBUF] = b
        s[_SREAD] = None
        if c is not None:  # a real source (adc, i2c, call): its reader, or said and skipped
            try:
                s[_SREAD] = __import__(key(_CSRC)).read(c, b)
            except Exception as e:
                print("config: sensor on channel %d: %r; skipped" % (ch, e))
                continue
        sensors.append(s)
    name = d.get(key(_CID))
    if not isinstance(name, str):
        name = board.uid()
    # the boot count, the auth key (bytes; None: auth off), the watchdog's ms (0: off)
    k += [st[_STBOOT], st[_STKEY]] + ints(d, SPEC[_SPWDT], "")  # (the fallback tiers: no watchdog)
    tasks: list = []
    links = bind(board, lk, net, w, tasks, buf, serial, ax)
    fw = SPEC[_SPFW]
    try:
        for L in links:
            tx = L[_TX]
            m = hello_into(
                tx, epoch, k[_RING], k[_SLOT], len(tx) - ax, k[_NBOOT], (name, fw, board.KIND), ax // 2
            )
            L[_HELLO] = bytes(tx[:m])
    except BaseException:
        for L in links:  # a retry must find its ports free (EADDRINUSE otherwise)
            L[_IO].close()
        raise
    kinds = " ".join(
        "%s:%d" % (key(_CUDP), lk[0][_LPORT]) if L[_UDP] else key(_CSER) for L in links
    )  # udp: its port
    print(
        "leadwire %s on %s, id %s, boot %d, epoch %08x, ring %dx%d, links %s, auth %s"
        % (fw, board.KIND, name, k[_NBOOT], epoch, k[_RING], k[_SLOT], kinds or "none", "on" if ax else "off")
    )
    return k, r, sensors, links, tasks


def read(st):
    # The first attempt's reads, once: config.json and the boot count (on the board's flash), and
    # the auth choice -> st[_STCONF], st[_STBOOT], st[_STKEY]
    import json

    config = SPEC[_SPCONFIG]
    try:
        with open(config) as f:
            d = json.load(f)
    except OSError:
        print("config: no %s on the board; using safe defaults" % config)
        d = {}
    except ValueError as e:
        print("config: %s is not valid JSON (%s); using safe defaults" % (config, e))
        d = {}
    if not isinstance(d, dict):
        print("config: %s is not a JSON object; using safe defaults" % config)
        d = {}
    n = 0
    try:
        with open("boots") as f:
            n = int(f.read())
    except (OSError, ValueError):
        pass
    try:
        with open("boots", "w") as f:
            f.write(str(n + 1))
    except OSError:
        print("boot: cannot store the boot count")
    st += [d, n + 1]
    # the auth choice, once (never printed: the key). Only checked here; auth.py is loaded
    # after the ring (its ~7 KB must not split the block the ring takes)
    t = d.get(key(_CKEY))
    try:
        # "auth": false: off; else a key is required (bad key: never said which digit)
        t = None if d.get(key(_CAUTH)) is False else bytes.fromhex(t.strip())  # type: ignore
        if t is not None and not 16 <= len(t) <= 64:
            raise ValueError
    except Exception:  # no key (None, not a str) or a bad one
        t = "bad key" if t else "no key"
        print("config: %s: %s" % (t, SPEC[_SPNOKEY]))
    st.append(t)


def check(d, tier):
    # config.json's object -> (what this tier keeps of it, the settings k without their last three,
    # the links' settings (_L* slots), the sensors' (channel, hz, size, the entry when it declares a
    # real source, else None)). Tier 1 keeps only the
    # config's links, id and wlan, tier 2 nothing of it.
    kudp = key(_CUDP)
    if tier:
        d = {c: d[c] for c in (key(_CID), kudp, key(_CSER), key(_CWLAN)) if tier == 1 and c in d}
    k = ints(d, SPEC[_SPSET], "")
    if k[_HCH] == k[_ACH]:
        print("config: health and alarm channels must differ; using 8 and 9")
        k[_HCH], k[_ACH] = 8, 9
    lk = []
    for name in (kudp, key(_CSER)):
        c = d.get(name, {})  # an object, false (link off) or missing (on, with defaults)
        if c is False:
            continue
        if not isinstance(c, dict):
            print("config: %s must be an object or false; using defaults" % name)
            c = {}
        lk.append(
            [name, c] + ints(c, SPEC[_SPUDP if name == kudp else _SPSER], name + ": ")
        )  # port, frame, gap
    ss = d.get(key(_CSENS))
    if ss is None:
        v = [int(x) for x in SPEC[_SPSENSORS].split()]
        names = [item.split()[0] for item in SPEC[_SPSENSOR].split(",")]
        ss = [dict(zip(names, v[i : i + 3])) for i in (0, 3)]
    elif not isinstance(ss, list):
        print("config: sensors must be a list; none used")
        ss = []
    sk = []
    chans = [k[_HCH], k[_ACH]]
    for s in ss[:8]:
        s = s if isinstance(s, dict) else {}
        ch, hz, size = ints(s, SPEC[_SPSENSOR], key(_CSENS) + ": ")
        if ch in chans or size > k[_SLOT]:
            print(
                "config: sensor on channel %d: channel taken or size above slot %d; skipped" % (ch, k[_SLOT])
            )
            continue
        chans.append(ch)
        sk.append((ch, hz, size, s if [x for x in range(_CADC, _CCALL + 1) if key(x) in s] else None))
    return d, k, lk, sk


def ints(d, s, name):
    # the integers of a SPEC part s ("path default low high", comma-separated) read from the
    # object d; name: where d is, in the messages ("udp: ", "sensors: "; "": config.json's top)
    out = []
    for item in s.split(","):
        path, dflt, lo, hi = item.split()
        dflt, lo, hi = int(dflt), int(lo), int(hi)
        v = d
        for p in path.split("."):
            v = v.get(p) if isinstance(v, dict) else None
        if v is not None and (type(v) is not int or not lo <= v <= hi):
            print("config: %s%s must be an integer in %d..%d; using %d" % (name, path, lo, hi, dflt))
            v = None
        out.append(dflt if v is None else v)
    return out


def network(board, d):
    # the board's station for the config's "wlan" -> (the station, None or what bringing it up
    # raised; the "wlan" object)
    w = d.get(key(_CWLAN))
    w = w if isinstance(w, dict) else {}
    try:
        net = board.network(w)
    except MemoryError:
        raise
    except Exception as e:  # no network module, no rp2.country, Wi-Fi refused: UDP only
        net = e
    return net, w


def ring(board, st, k, links, sensors):
    # The ring, its epoch and the links' buffers -> (ring, epoch, shared frame buffer, serial
    # buffers): the big blocks at once, before anything fragments the heap. A ring that does not
    # fit falls back to 256 x 16 (k updated).
    import gc

    from leadwire._compat import random_u32
    from leadwire.framing import StreamDecoder
    from leadwire.ring import EventRing

    # The epoch and the ring's start: the RNG mixed with the boot count and the board id, so two
    # boots never share one even where os.urandom is constant (an emulated Pico) or weak; the
    # odd multiplier keeps distinct boot counts distinct (mod 2^32). Allocates: boot only.
    mx = st[_STBOOT] * 0x9E3779B1
    for c in board.uid():
        mx = mx * 31 + ord(c)
    mx &= 0xFFFFFFFF
    epoch = random_u32() ^ mx
    mx = random_u32() ^ mx ^ 0x5A5A5A5A  # the ring's start (drawn here: no garbage where it goes)
    # Does the ring fit? It must leave, once the agent is ready, the free heap it needs at run time:
    # the garbage between two collections (gc.threshold 4 KB), the push-session modules (~4.7 KB)
    # and 3 report bodies, plus slack: 10.3 KB + 3 bodies. From here to ready the rest of the boot
    # and the agent cost the frame and serial buffers and the sensors, less ~3.2 KB (lwboot is
    # unloaded). With a key, auth.py, lwauth, the key and an endpoint per link: ~11 KB for one link, ~12 KB
    # for two (free heap at ready, auth on vs off). Measured on the unix port (64-bit): pessimistic
    # for 32-bit boards. board.mem_free(): gc.mem_free() (ESP32: less the IDF RAM left to Wi-Fi).
    if st[_STHOLD]:
        st[_STHOLD].pop()  # main.py's block: the ring goes where it was, in one piece
    gc.collect()
    free = board.mem_free()
    kser = key(_CSER)
    ax = _AUTH_SIZE if st[_STKEY] else 0
    frame = max([x[_LFRAME] for x in links] + [0])
    need = 7100 + 3 * k[_RBYTES] + frame + (9900 + 1100 * len(links) if ax else 0)
    for x in links:
        need += 2 * x[_LFRAME] + 400 if x[_LKEY] == kser else 0
    for ch, hz, size, c in sensors:
        need += size + 96
    # the links' buffers, then the ring at once: the big blocks before anything fragments the heap
    # (one frame buffer for all links: frames are built and sent without an await in between)
    # with auth on, every buffer has room for the 8-byte trailer after the largest unsigned frame;
    # the answers and fragments are sized so that the signed frame still fits the link's frame
    buf = bytearray(frame + ax)
    serial = [
        [bytearray(64), bytearray(x[_LFRAME] + ax + (x[_LFRAME] + ax) // 254 + 2), StreamDecoder(128 + ax)]
        for x in links
        if x[_LKEY] == kser
    ]
    ring = None
    rb = k[_SLOT]  # the ring's store (EventRing: from 32 B, slots of 4 + the slot rounded up to 4)
    rb = k[_RING] * (3 + rb if rb < 32 else 4 + ((rb + 3) & ~3))
    if rb + need <= free:
        try:
            ring = EventRing(k[_RING], mx, k[_SLOT], epoch)
        except MemoryError:
            pass
    if ring is None:
        print(
            "config: ring %dx%d (%d B) does not fit: %d B free, the agent needs %d B besides; using 256x16"
            % (k[_RING], k[_SLOT], rb, free, need)
        )
        k[_RING], k[_SLOT] = 256, 16
        ring = EventRing(256, mx, 16, epoch)
    return ring, epoch, buf, serial[0] if serial else None


def bind(board, links, network, w, tasks, buf, serial, a):
    # Open the links of lk -> their link records (a link that cannot open is said and left out;
    # a MemoryError, or anything that escapes, closes those opened and is raised: a retry must
    # find its ports free). A WLAN station's keeper goes into tasks (started by lwagent.start).
    out: list = []
    try:
        for x in links:
            name, c, port = x[_LKEY], x[_LCONF], x[_LPORT]
            try:
                if name == key(_CSER):
                    io = board.serial(c, serial[1])  # (its COBS buffer: rp2's DMA sends from it)
                    if io is not None:
                        out.append(link(x, io, False, buf, serial, a))
                    continue
                if board.KIND != "unix":
                    if network is None:
                        print("udp: no wlan ssid in config: UDP off")
                        continue
                    if isinstance(network, Exception):
                        raise network
                    import wlan

                    tasks.append((wlan.keep, (network, w)))  # started by lwagent.start
                import socket  # only here: a board without networking (plain Pico) has none

                b = c.get(key(_CBIND))
                if not isinstance(b, str):  # a virtual board's network is the host's loopback
                    b = SPEC[_SPBIND].split()[board.KIND != "unix"]  # 127.0.0.1, else 0.0.0.0
                h = c.get(key(_CHOST))
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                try:
                    s.bind(addr(b, port))
                    out.append(link(x, s, addr(h, port) if isinstance(h, str) else None, buf, None, a))
                except BaseException:
                    s.close()  # not left bound: a retry (or the next boot) needs the port
                    raise
            except MemoryError:
                raise  # the heap: the whole attempt again, on safe defaults
            except Exception as e:  # whatever a port raises (no socket or network module:
                # ImportError; no rp2.country: AttributeError; OSError, ValueError): this link only
                print("%s: cannot open (port %d): %r" % (name, port, e))
    except BaseException:
        for L in out:  # a retry must find its ports free (EADDRINUSE otherwise)
            L[_IO].close()
        raise
    return out


def key(n):
    # config.json's key n (_C* slots)
    return SPEC[_SPKEYS][n]


def addr(s, port):
    # "host:port" or "host" -> socket address (socket: imported with the UDP link)
    import socket

    if ":" in s:
        s, port = s.rsplit(":", 1)
    return socket.getaddrinfo(s, int(port))[0][-1]


def link(x, io, dest, buf, serial, a):
    # A link record, as lwagent indexes it (the _IO.._LIM slots), for the link settings x (_L*
    # slots). io: socket or stream; dest: False for serial, else the UDP address where the HELLO
    # after boot and reports go (None: the first poller's); buf: the one frame buffer of all links;
    # serial: the serial link's read chunk, COBS buffer and decoder; a: the auth trailer's size
    # (0: auth off).
    frame = x[_LFRAME]
    L: list = [None] * _NLINK
    L[_IO] = io
    L[_UDP] = dest is not False
    L[_TX] = memoryview(buf)[: frame + a]
    L[_MV] = memoryview(L[_TX])
    L[_Q] = None  # the FrameQueue, made on the first SUBSCRIBE
    L[_GAP] = x[_LGAP]
    L[_NEXT] = 0
    L[_SUBS] = {}
    L[_OWN] = {}
    L[_RAW] = []
    L[_PEER] = dest or None
    L[_HELLO] = b""  # (set once the HELLO is built)
    if dest is False:
        L[_RB], L[_CB], L[_DEC] = serial
    L[_EP] = None  # the auth endpoint: lwauth.setup, after this module is gone
    L[_LIM] = frame - _OVERHEAD - a  # the payload budget of a frame
    L[_LASTP] = -1  # no POLL answered yet
    return L
