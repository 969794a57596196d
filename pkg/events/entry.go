package events

import (
	"time"
)

// TimestampFormat is how a history entry's timestamp is written: the time
// JetStream stored the record, in UTC.
const TimestampFormat = time.RFC3339Nano
