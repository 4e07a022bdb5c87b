# Boot: read config.json and check it value by value (a bad or missing value is reported on the
# console and replaced by its safe default: never raised), count the boot, open the links, build
# the HELLO. main.py unloads this module once the agent is built.
#
# Memory: the interpreter keeps every short string literal and every name it loads as a qstr for
# good, even after this module is unloaded. So this module defines one function, and the config
# keys and defaults live in long strings (never interned) split at run time.

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
    "|ch 1 0 255,hz 10 1 100000,size 16 2 512"  # a sensor
    "|config.json|0.1.0|id sensors udp serial wlan bind host|1 10 16 2 2 12"  # default sensors
)


def build(board, use_config=True):
    """config.json -> (settings, ring, sensors, links, extra tasks). A failed link leaves the rest."""
    import json
    import socket

    spec, uspec, sspec, sensor, config, fw, keys, dsens = SPEC.split("|")
    kid, ksens, kudp, kser, kwlan, kbind, khost = keys.split()

    def ints(d, spec, where):
        out = []
        for item in spec.split(","):
            path, dflt, lo, hi = item.split()
            dflt, lo, hi = int(dflt), int(lo), int(hi)
            v = d
            for p in path.split("."):
                v = v.get(p) if isinstance(v, dict) else None
            if v is not None and (type(v) is not int or not lo <= v <= hi):
                print("config: %s%s must be an integer in %d..%d; using %d" % (where, path, lo, hi, dflt))
                v = None
            out.append(dflt if v is None else v)
        return out

    def addr(s, port):
        # "host:port" or "host" -> socket address
        if ":" in s:
            s, port = s.rsplit(":", 1)
        return socket.getaddrinfo(s, int(port))[0][-1]

    try:
        if not use_config:
            raise OSError("ignored")
        with open(config) as f:
            d = json.load(f)
    except OSError:
        if use_config:
            print("config: no %s on the board; using safe defaults" % config)
        d = {}
    except ValueError as e:
        print("config: %s is not valid JSON (%s); using safe defaults" % (config, e))
        d = {}
    if not isinstance(d, dict):
        print("config: %s is not a JSON object; using safe defaults" % config)
        d = {}
    k = ints(d, spec, "")
    from leadwire._compat import random_u32
    from leadwire.ring import EventRing

    epoch = random_u32()
    ring = EventRing(k[0], None, k[1], epoch)  # first: the largest block, before the heap fragments
    from leadwire.device import hello_into
    from leadwire.framing import StreamDecoder

    name = d.get(kid)
    if not isinstance(name, str):
        name = board.uid()
    if k[3] == k[5]:
        print("config: health and alarm channels must differ; using 8 and 9")
        k[3], k[5] = 8, 9
    ss = d.get(ksens)
    if ss is None:
        v = [int(x) for x in dsens.split()]
        names = [item.split()[0] for item in sensor.split(",")]
        ss = [dict(zip(names, v[i : i + 3])) for i in (0, 3)]
    elif not isinstance(ss, list):
        print("config: sensors must be a list; none used")
        ss = []
    sensors = []
    chans = [k[3], k[5]]
    for s in ss[:8]:
        ch, hz, size = ints(s if isinstance(s, dict) else {}, sensor, "sensors: ")
        if ch in chans or size > k[1]:
            print("config: sensor on channel %d: channel taken or size above slot %d; skipped" % (ch, k[1]))
            continue
        chans.append(ch)
        b = bytearray(size)
        for i in range(2, size):
            b[i] = ch
        sensors.append([ch, 1000000 // hz, size, 0, 0, b])
    # boot count, kept on the board's flash
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
    k.append(n + 1)
    links = []
    tasks = []
    opened: list = []  # (io, peer: False for serial, UDP address or None, frame size, gap)
    for key in (kudp, kser):
        c = d.get(key, {})  # an object, false (link off) or missing (on, with defaults)
        if c is False:
            continue
        if not isinstance(c, dict):
            print("config: %s must be an object or false; using defaults" % key)
            c = {}
        port, frame, gap = ints(c, uspec if key == kudp else sspec, key + ": ")
        try:
            if key == kser:
                io = board.serial(c)
                if io is not None:
                    opened.append((io, False, frame, gap))
                continue
            if board.KIND != "unix":
                w = d.get(kwlan)
                w = w if isinstance(w, dict) else {}
                net = board.network(w)
                if net is None:
                    print("udp: no wlan ssid in config: UDP off")
                    continue
                import wlan

                tasks.append(wlan.keep(net, w))
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            bind = c.get(kbind)
            if not isinstance(bind, str):  # a virtual board's network is the host's loopback
                bind = "127.0.0.1" if board.KIND == "unix" else "0.0.0.0"
            s.bind(addr(bind, port))
            h = c.get(khost)
            opened.append((s, addr(h, port) if isinstance(h, str) else None, frame, gap))
        except (OSError, ValueError, TypeError, IndexError) as e:
            print("%s: cannot open (port %d): %r" % (key, port, e))
    # one frame buffer for all links (frames are built and sent without an await in between)
    shared = bytearray(max([o[2] for o in opened] + [0]))
    for io, peer, frame, gap in opened:
        # a link, as lwagent indexes it: io, udp, tx, memoryview(tx), frame queue (made on the first
        # SUBSCRIBE), gap, next send, sessions, message owners, resend list, peer (UDP: where the
        # HELLO after boot and reports go), HELLO; serial: read chunk, COBS buffer, decoder
        tx = memoryview(shared)[:frame]
        L = [io, peer is not False, tx, memoryview(tx), None, gap, 0, {}, {}, [], peer or None, b""]
        if peer is False:
            L += [bytearray(64), bytearray(frame + frame // 254 + 2), StreamDecoder(128)]
        links.append(L)
    if not links:
        print("boot: no link could be opened")
    for L in links:
        tx = L[2]
        L[11] = bytes(tx[: hello_into(tx, epoch, k[0], k[1], len(tx), k[14], (name, fw, board.KIND))])
    kinds = " ".join(kudp if L[1] else kser for L in links)
    print(
        "leadwire %s on %s, id %s, boot %d, epoch %08x, ring %dx%d, links %s"
        % (fw, board.KIND, name, k[14], epoch, k[0], k[1], kinds)
    )
    return k, ring, sensors, links, tasks
