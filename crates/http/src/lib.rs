//! Sans-io HTTP/1 codec: parsing and serialising messages with strict framing.
