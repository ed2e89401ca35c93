//! The body decoder on any bytes: as a webhook or Kafka body (with and without the Azure
//! envelope unwrapped, with a small per-event limit so that the limit's paths are reached too)
//! and as one line of a log file. It must never panic or overflow its stack; every event it
//! gives out passes validation, and every rejected record says where it was.
#![no_main]

use kausality_stream::decode::{decode_body, decode_document, validate, AuditEvent, DecodeOptions, Invalid, Location, Unwrap};
use libfuzzer_sys::fuzz_target;

fn check(location: Location, r: Result<AuditEvent<'_>, Invalid>) {
    match r {
        Ok(ev) => {
            assert!(validate(&ev, location).is_ok(), "an event given out fails validation at {location}");
        }
        Err(e) => {
            assert_eq!(e.location, location);
            assert!(!e.message.is_empty() && !e.path().is_empty());
        }
    }
}

fuzz_target!(|data: &[u8]| {
    for (unwrap, max_record_bytes) in [(Unwrap::None, 8 << 20), (Unwrap::Aks, 8 << 20), (Unwrap::None, 512)] {
        let opts = DecodeOptions { unwrap, max_record_bytes };
        decode_body(data, &opts, &mut check);
    }
    decode_document(data, Location::Line(1), &DecodeOptions::default(), &mut check);
});
