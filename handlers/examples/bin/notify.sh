#!/bin/sh
# Example exec handler: reads the payload from stdin and logs one line.
payload=$(cat)
echo "notify: event $HOOKBOX_EVENT_ID ($HOOKBOX_EVENT_TYPE), attempt $HOOKBOX_ATTEMPT: $payload" >&2
exit 0
