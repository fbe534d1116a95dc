pytest_plugins = ["specperf.plugin"]
