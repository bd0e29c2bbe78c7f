"""Jobs: job folders, strict resume, the event log, the summary heartbeat, stop requests,
status views and the HTML report."""
