# Boot: read config.json and check it value by value (a bad or missing value is reported on the
# console and replaced by its safe default: never raised), count the boot, open the links, build
# the HELLO. main.py unloads this module once the agent is built.
#
# The settings table is one long string parsed at run time: short string literals in code are
# interned as qstrs, which a board keeps for good; runtime strings are freed after boot.
import json
import socket

FIRMWARE = "0.1.0"
CONFIG = "config.json"

# "path default low high" -- the order is lwagent's settings list (_RING ... _CPRIO)
SPEC = (
    "ring 256 1 4096,slot 16 8 512,tick 1 0 100,health.ch 8 0 255,health.ms 5000 0 3600000,"
    "alarm.ch 9 0 255,alarm.prio 7 0 15,alarm.ms 0 0 3600000,alarm.gap 1000 0 60000,"
    "report.ms 250 0 60000,report.bytes 512 64 4096,report.timeout 1000 10 60000,"
    "report.prio 0 0 15,report.close 3 0 15"
)
SENSOR = "ch 1 0 255,hz 10 1 100000,size 16 2 512"
LINK = "port 4210 1 65535,frame 1024 64 1472,gap 0 0 1000"  # udp; serial: frame 256 64 2059
SENSORS = [{"ch": 1, "hz": 10, "size": 16}, {"ch": 2, "hz": 2, "size": 12}]


def ints(d, spec, where):
    """The integers of `spec` read from dict d, each checked; defaults where missing or bad."""
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


def load():
    try:
        with open(CONFIG) as f:
            d = json.load(f)
    except OSError:
        print("config: no %s on the board; using safe defaults" % CONFIG)
        d = {}
    except ValueError as e:
        print("config: %s is not valid JSON (%s); using safe defaults" % (CONFIG, e))
        d = {}
    if not isinstance(d, dict):
        print("config: %s is not a JSON object; using safe defaults" % CONFIG)
        d = {}
    return d


def boots():
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
    return n + 1


def addr(s, port):
    # "host:port" or "host" -> socket address
    if ":" in s:
        s, port = s.rsplit(":", 1)
    return socket.getaddrinfo(s, int(port))[0][-1]


def sub(d, key):
    # a link's settings: an object, false (off) or missing (on, with defaults)
    v = d.get(key, {})
    if v is False or isinstance(v, dict):
        return v
    print("config: %s must be an object or false; using defaults" % key)
    return {}


def build(board):
    """config.json -> (settings, ring, sensors, links, extra tasks). A failed link leaves the rest."""
    d = load()
    k = ints(d, SPEC, "")
    from leadwire.ring import EventRing

    ring = EventRing(k[0], None, k[1])  # first: the largest block, before the heap fragments
    from lwagent import link

    from leadwire._compat import random_u32
    from leadwire.device import hello_into
    name = d.get("id")
    if not isinstance(name, str):
        name = board.uid()
    ss = d.get("sensors", SENSORS)
    if not isinstance(ss, list):
        print("config: sensors must be a list; using defaults")
        ss = SENSORS
    sensors = []
    chans = [k[3], k[5]]
    for s in ss[:8]:
        ch, hz, size = ints(s if isinstance(s, dict) else {}, SENSOR, "sensors.")
        if ch in chans or size > k[1]:
            print("config: sensor on channel %d: channel taken or size above slot %d; skipped" % (ch, k[1]))
            continue
        chans.append(ch)
        b = bytearray(size)
        for i in range(2, size):
            b[i] = ch
        sensors.append([ch, 1000000 // hz, size, 0, 0, b])
    if k[3] == k[5]:
        print("config: health and alarm channels must differ; using 8 and 9")
        k[3], k[5] = 8, 9
    k.append(boots())
    links = []
    tasks = []
    u = sub(d, "udp")
    if u is not False and board.KIND != "unix":
        w = d.get("wlan")
        net = board.network(w if isinstance(w, dict) else {})
        if net is None:
            print("udp: no wlan ssid in config: UDP off")
            u = False
        else:
            import wlan

            tasks.append(wlan.keep(net, w))
    if u is not False:
        port, frame, gap = ints(u, LINK, "udp.")
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(addr(u.get("bind", "0.0.0.0"), port))
            L = link(s, True, frame, gap)
            if isinstance(u.get("host"), str):
                L[10] = addr(u["host"], port)  # HELLO after boot, reports before a SUBSCRIBE
            links.append(L)
        except (OSError, ValueError, TypeError, IndexError) as e:
            print("udp: cannot bind port %d: %r" % (port, e))
    c = sub(d, "serial")
    if c is not False:
        _, frame, gap = ints(c, LINK.replace("1024 64 1472", "256 64 2059"), "serial.")
        try:
            io = board.serial(c)
            if io is not None:
                links.append(link(io, False, frame, gap))
        except (OSError, ValueError, TypeError) as e:
            print("serial: cannot open: %r" % (e,))
    if not links:
        print("boot: no link could be opened")
    epoch = random_u32()
    for L in links:
        tx = L[2]
        L[11] = bytes(tx[: hello_into(tx, epoch, k[0], k[1], len(tx), k[14], (name, FIRMWARE, board.KIND))])
    kinds = " ".join("udp" if L[1] else "serial" for L in links)
    print(
        "leadwire %s on %s, id %s, boot %d, epoch %08x, ring %dx%d, links %s"
        % (FIRMWARE, board.KIND, name, k[14], epoch, k[0], k[1], kinds)
    )
    return k, ring, sensors, links, tasks
