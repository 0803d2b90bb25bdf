package watermark

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
)

func isUnknownTopic(err error) bool { return errors.Is(err, kerr.UnknownTopicOrPartition) }
