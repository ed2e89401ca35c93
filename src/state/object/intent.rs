//! The intent of an applier's parent (DESIGN §1.9): a GitOps tool's parent does not bump its
//! generation when its source moves on, so its state counts intents instead. Each new intent
//! (a new revision to apply, a spec change, a person's request or sync) is the next `epoch`;
//! the parent showing that intent carried out makes it the `applied` one. The judgement reads
//! them as a generation and its observed generation: an applier writing while the epoch is
//! ahead of the applied one carries out an intent (`expected`), at the applied one it has
//! none (`drift`).

use std::sync::Arc;

use super::ObjectState;
use crate::config::appliers::IntentFacts;

/// What an applier's parent showed of its intents.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Intent {
    /// The latest intent's key ([`IntentFacts::key`]).
    pub key: u64,
    /// How many distinct intents were seen, counting from 1.
    pub epoch: i64,
    /// The epoch last shown carried out; 0: none yet.
    pub applied: i64,
    /// The revision applied last, as the parent shows it.
    pub revision: Option<Arc<str>>,
    /// The revision being applied, as the parent shows it.
    pub target: Option<Arc<str>>,
}

impl ObjectState {
    /// The intents of an applier's parent; `None` for any other object.
    pub fn intent(&self) -> Option<&Intent> {
        self.rare.as_ref().and_then(|r| r.ext.as_deref()).and_then(|e| e.intent.as_deref())
    }

    /// Takes what the parent's latest response shows of its intent.
    pub fn observe_intent(&mut self, f: &IntentFacts) {
        let i = self.rare_mut().ext_mut().intent.get_or_insert_with(Box::default);
        if i.epoch == 0 || i.key != f.key {
            i.epoch += 1;
            i.key = f.key;
        }
        if f.applied {
            i.applied = i.epoch;
        }
        i.revision = f.revision.clone();
        i.target = f.target.clone();
    }

    /// Sets the intents (a restore).
    pub fn set_intent(&mut self, intent: Option<Intent>) {
        match intent {
            Some(i) => self.rare_mut().ext_mut().intent = Some(Box::new(i)),
            None if self.intent().is_some() => {
                self.rare_mut().ext_mut().intent = None;
                self.drop_empty_origins();
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Sym, Ty};

    fn facts(key: u64, applied: bool, revision: &str) -> IntentFacts {
        IntentFacts { key, applied, revision: Some(Arc::from(revision)), target: None }
    }

    #[test]
    fn each_new_intent_is_an_epoch_and_carrying_it_out_applies_it() {
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        assert!(s.intent().is_none());
        s.observe_intent(&facts(7, false, "a"));
        assert_eq!((s.intent().unwrap().epoch, s.intent().unwrap().applied), (1, 0));
        s.observe_intent(&facts(7, true, "a"));
        assert_eq!((s.intent().unwrap().epoch, s.intent().unwrap().applied), (1, 1), "the same intent, carried out");
        s.observe_intent(&facts(8, false, "a"));
        assert_eq!((s.intent().unwrap().epoch, s.intent().unwrap().applied), (2, 1), "a new one, not yet");
        s.observe_intent(&facts(8, true, "b"));
        assert_eq!(
            (s.intent().unwrap().epoch, s.intent().unwrap().applied, s.intent().unwrap().revision.as_deref()),
            (2, 2, Some("b"))
        );
        s.set_intent(None);
        assert!(s.intent().is_none() && s.rare.is_none());
    }
}
