# Config-declared sources: a "sensors" entry of config.json with one of these keys reads a real
# value once per period (its "hz") instead of the synthetic sample, and the agent writes what it
# read as one event on the entry's "ch" (docs/firmware.md, "Writing your application"):
#   "adc": n          machine.ADC(n).read_u16(), 2 bytes big-endian. rp2: 0..3 = GP26..GP29,
#                     4 = the RP2040's internal temperature sensor (27 - (V - 0.706) / 0.001721 C)
#   "i2c": {"bus": 0, "sda": 4, "scl": 5, "freq": 400000, "addr": 72, "reg": 0, "n": 2}
#                     machine.I2C(bus).readfrom_mem_into: n bytes of register reg of device addr
#                     (sda and scl both or neither, freq: the port's defaults when absent)
#   "call": "mod.fn"  fn(buf) from the board's module mod: it writes its reading into buf (the
#                     entry's "size" bytes) and returns how many bytes to send (0 or None: none
#                     this time)
# lwboot loads this module only when the config declares one (a board without pays nothing).
# Allocation per reading: 0 bytes for adc and i2c (the buffer and its view are made here, once);
# a call allocates what its function does.
import machine


def read(c, buf):
    """The entry c -> a function buf -> bytes read into buf (raises ValueError for a bad entry)."""
    if "adc" in c:
        adc = machine.ADC(c["adc"])

        def read_adc(b):
            v = adc.read_u16()
            b[0] = v >> 8
            b[1] = v & 0xFF
            return 2

        if len(buf) < 2:
            raise ValueError("adc: size below 2")
        return read_adc
    if "i2c" in c:
        d = c["i2c"]
        n = d.get("n", 1)
        if not 0 < n <= len(buf):
            raise ValueError("i2c: n must be 1..size")
        f = d.get("freq", 400000)
        if "sda" in d:
            bus = machine.I2C(d.get("bus", 0), sda=machine.Pin(d["sda"]), scl=machine.Pin(d["scl"]), freq=f)
        else:  # the port's default pins
            bus = machine.I2C(d.get("bus", 0), freq=f)
        addr = d["addr"]
        reg = d.get("reg", 0)
        view = memoryview(buf)[:n]

        def read_i2c(b):
            bus.readfrom_mem_into(addr, reg, view)
            return n

        return read_i2c
    name = c["call"]
    if not isinstance(name, str) or "." not in name:
        raise ValueError("call: 'module.function'")
    mod, fn = name.rsplit(".", 1)
    return getattr(__import__(mod), fn)
