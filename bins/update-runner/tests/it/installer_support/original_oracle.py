"""Oracle for the installer supervision tests: runs the original's own
update_runner functions (imported unchanged from the originals folder) on the
inputs the Rust tests give it, and answers in JSON on stdout.

Input (stdin, JSON): {"originals": DIR, "calls": [CALL, ...]} where CALL is
  {"tail": PATH, "start_offset": N}                 -> installer_log_tail
  {"trim": PATH, "limit": N}                        -> trim_installer_log
  {"run": {...run_installer keyword arguments...},
   "termination_poll": SECONDS}                      -> run_installer
Output: one result object per call.
"""
import json
import sys
from pathlib import Path

request = json.load(sys.stdin)
sys.path.insert(0, request["originals"])
import update_runner  # noqa: E402


def outcome(call):
    if "tail" in call:
        return {"tail": update_runner.installer_log_tail(
            Path(call["tail"]), start_offset=call["start_offset"])}
    if "trim" in call:
        update_runner.trim_installer_log(Path(call["trim"]), call["limit"])
        return {"trimmed": True}
    arguments = dict(call["run"])
    command = arguments.pop("command")
    for key in ("cwd", "status_path", "log_path"):
        arguments[key] = Path(arguments[key])
    arguments["accepted_returncodes"] = tuple(arguments["accepted_returncodes"])
    update_runner.INSTALLER_TERMINATION_POLL_SECONDS = call["termination_poll"]
    try:
        update_runner.run_installer(command, **arguments)
    except update_runner.InstallerRolledBack:
        return {"outcome": "rolled_back"}
    except Exception as error:  # the class and message are the result
        return {"outcome": "error", "class": type(error).__name__, "message": str(error)}
    return {"outcome": "installed"}


json.dump([outcome(call) for call in request["calls"]], sys.stdout)
