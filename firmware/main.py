# leadwire device agent entry point (runs at power-on on ESP32 / Pico W; `leadwire board` runs it on
# the unix port): the agent alone. An application replaces this file with its own main.py that
# calls lwapp.run(app) (docs/firmware.md, "Writing your application"). lwapp builds the agent from
# config.json and runs it under asyncio. A bad config or a failed link falls back to safe
# defaults; a config the agent cannot run on stops at the REPL ("not ready": a reset would not
# help). A task's pass that fails is counted and tried again after a back-off (lwagent). An error
# nothing survives (fatal) is said on the console, then the board resets after 10 s. Config "wdt":
# a machine.WDT, started by lwboot once the agent is built and fed by the io loop, resets a hung
# board.
import lwapp

lwapp.run()
