//! A view of a Kubernetes object (the audit event's `responseObject`) that reads what the model
//! needs in one pass: metadata as typed fields, `spec` and `status` as raw slices (hashed, not
//! parsed), every other top-level field folded into a hash for kinds without a spec.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// String pairs borrowed from the input (annotations, labels).
pub(super) type StrPairs<'a> = Vec<(Cow<'a, str>, Cow<'a, str>)>;

/// Annotation prefix of everything this service reads from objects.
pub const ANNOTATION_PREFIX: &str = "kausality.io/";

/// An object as the API server returned it (`responseObject`), as far as the model reads it.
#[derive(Debug, Default)]
pub struct ObjectView<'a> {
    /// Its `apiVersion` (`apps/v1`).
    pub api_version: Option<Cow<'a, str>>,
    /// Its kind (`Deployment`).
    pub kind: Option<Cow<'a, str>>,
    /// Its metadata.
    pub metadata: Metadata<'a>,
    /// Its `spec`, kept raw: hashed, and parsed only where the model needs a field of it.
    pub spec: Option<&'a RawValue>,
    /// Its `status`, kept raw: parsed by [`StatusView::parse`].
    pub status: Option<&'a RawValue>,
    /// Top-level fields other than apiVersion/kind/metadata/spec/status, in document order:
    /// the content of spec-less kinds (ConfigMap `data`, RBAC `rules`, ...), a List's `items`,
    /// a Status' `details`.
    pub other: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'a> ObjectView<'a> {
    /// The top-level field `name` among [`ObjectView::other`], kept raw.
    pub fn field(&self, name: &str) -> Option<&'a RawValue> {
        self.other.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }

    /// True for the `Status` object the API server returns for some deletes.
    pub fn is_status(&self) -> bool {
        self.kind.as_deref() == Some("Status")
    }

    /// True for a `...List` response (a deletecollection's deleted items).
    pub fn is_list(&self) -> bool {
        self.kind.as_deref().is_some_and(|k| k.ends_with("List")) && self.field("items").is_some()
    }
}

/// An object's `metadata`, as far as the model reads it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata<'a> {
    /// Its name.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub name: Option<Cow<'a, str>>,
    /// Its namespace; absent for a cluster-scoped object.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub namespace: Option<Cow<'a, str>>,
    /// Its UID: what its state is keyed by.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub uid: Option<Cow<'a, str>>,
    /// Its resourceVersion, the order of its writes in etcd.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub resource_version: Option<Cow<'a, str>>,
    /// Its generation: bumped by the API server when the spec changes.
    #[serde(default, deserialize_with = "lenient_i64")]
    pub generation: Option<i64>,
    /// When a delete was asked for; the object lives on until its finalizers are done.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub deletion_timestamp: Option<Cow<'a, str>>,
    /// The grace period of an object being deleted (a pod's): while it is above 0 the object
    /// stays, terminating, until its final delete, finalizers or none.
    #[serde(default, deserialize_with = "lenient_i64")]
    pub deletion_grace_period_seconds: Option<i64>,
    /// How many finalizers hold the object (an object being deleted is gone once none are left).
    #[serde(default, deserialize_with = "count_list")]
    pub finalizers: usize,
    /// Its owners; the one with `controller: true` is its parent.
    #[serde(borrow, default, deserialize_with = "lenient_owner_refs")]
    pub owner_references: Vec<OwnerRef<'a>>,
    /// The annotations the model reads (`kausality.io/` and the appliers'); the rest is skipped.
    #[serde(borrow, default, deserialize_with = "kausality_annotations")]
    pub annotations: StrPairs<'a>,
    /// Its labels.
    #[serde(borrow, default, deserialize_with = "string_map")]
    pub labels: StrPairs<'a>,
}

/// One of `metadata.ownerReferences`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerRef<'a> {
    /// The owner's `apiVersion`.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub api_version: Option<Cow<'a, str>>,
    /// The owner's kind.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub kind: Option<Cow<'a, str>>,
    /// The owner's name.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub name: Option<Cow<'a, str>>,
    /// The owner's UID.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub uid: Option<Cow<'a, str>>,
    /// `true` for the one owner that is the object's controller.
    #[serde(default)]
    pub controller: Option<bool>,
}

impl<'a> Metadata<'a> {
    /// The ownerReference with `controller: true`, if any.
    pub fn controller_ref(&self) -> Option<&OwnerRef<'a>> {
        self.owner_references
            .iter()
            .find(|r| r.controller == Some(true) && r.uid.as_deref().is_some_and(|u| !u.is_empty()))
    }

    /// The value of the kept annotation `key`, if the object has it.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_ref())
    }
}

/// The parts of `status` that tell whether the controller has caught up, is ready, and is
/// still at work (the counters and revisions of the native workload kinds: DESIGN §1.3).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusView<'a> {
    /// The generation the controller last saw (`status.observedGeneration`).
    #[serde(default, deserialize_with = "lenient_i64")]
    pub observed_generation: Option<i64>,
    /// `status.conditions`; elements of another shape are skipped.
    #[serde(borrow, default, deserialize_with = "lenient_conditions")]
    pub conditions: Vec<Condition<'a>>,
    /// Deployment, ReplicaSet, StatefulSet.
    #[serde(default, deserialize_with = "lenient_i64")]
    pub replicas: Option<i64>,
    /// Replicas at the latest revision; absent reads as 0 where the kind counts replicas.
    #[serde(default, deserialize_with = "lenient_i64")]
    pub updated_replicas: Option<i64>,
    /// Replicas ready.
    #[serde(default, deserialize_with = "lenient_i64")]
    pub ready_replicas: Option<i64>,
    /// Replicas available (ready for `minReadySeconds`).
    #[serde(default, deserialize_with = "lenient_i64")]
    pub available_replicas: Option<i64>,
    /// StatefulSet.
    #[serde(borrow, default, deserialize_with = "lenient_str")]
    pub current_revision: Option<Cow<'a, str>>,
    /// The revision being rolled out; equal to `current_revision` once done.
    #[serde(borrow, default, deserialize_with = "lenient_str")]
    pub update_revision: Option<Cow<'a, str>>,
    /// DaemonSet.
    #[serde(default, deserialize_with = "lenient_i64")]
    pub desired_number_scheduled: Option<i64>,
    /// Nodes running the latest revision's pod.
    #[serde(default, deserialize_with = "lenient_i64")]
    pub updated_number_scheduled: Option<i64>,
    /// Nodes whose pod is available.
    #[serde(default, deserialize_with = "lenient_i64")]
    pub number_available: Option<i64>,
    /// Job: when its controller started it, and when it completed.
    #[serde(borrow, default, deserialize_with = "lenient_str")]
    pub start_time: Option<Cow<'a, str>>,
    /// When the Job completed.
    #[serde(borrow, default, deserialize_with = "lenient_str")]
    pub completion_time: Option<Cow<'a, str>>,
}

/// One of `status.conditions`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition<'a> {
    /// Its type (`Available`, `Ready`, `Progressing`, `Synced`, ...).
    #[serde(borrow, default, deserialize_with = "opt_str", rename = "type")]
    pub type_: Option<Cow<'a, str>>,
    /// `True`, `False` or `Unknown`.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub status: Option<Cow<'a, str>>,
    /// The generation it was set for, on kinds that say so.
    #[serde(default, deserialize_with = "lenient_i64")]
    pub observed_generation: Option<i64>,
    /// Its machine-readable reason (`NewReplicaSetAvailable`).
    #[serde(borrow, default, deserialize_with = "lenient_str")]
    pub reason: Option<Cow<'a, str>>,
}

impl<'a> StatusView<'a> {
    /// Parses a raw `status`; a status of an unexpected shape reads as empty (never an error:
    /// custom resources put anything there).
    pub fn parse(raw: Option<&'a RawValue>) -> StatusView<'a> {
        raw.and_then(|r| serde_json::from_str(r.get()).ok()).unwrap_or_default()
    }

    /// The condition of type `type_`, if the status has one.
    pub fn condition(&self, type_: &str) -> Option<&Condition<'a>> {
        self.conditions.iter().find(|c| c.type_.as_deref() == Some(type_))
    }

    /// Whether the condition of type `type_` is `True`.
    pub fn condition_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status.as_deref() == Some("True"))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ObjectView<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ObjectView<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a Kubernetes object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut o = ObjectView::default();
                while let Some(CowStr(key)) = map.next_key::<CowStr<'de>>()? {
                    match key.as_ref() {
                        "apiVersion" => o.api_version = map.next_value::<Option<CowStr>>()?.map(|c| c.0),
                        "kind" => o.kind = map.next_value::<Option<CowStr>>()?.map(|c| c.0),
                        "metadata" => o.metadata = map.next_value::<Option<Metadata>>()?.unwrap_or_default(),
                        "spec" => o.spec = Some(map.next_value()?),
                        "status" => o.status = Some(map.next_value()?),
                        _ => {
                            let v: &'de RawValue = map.next_value()?;
                            o.other.push((key, v));
                        }
                    }
                }
                Ok(o)
            }
        }
        d.deserialize_map(V)
    }
}

/// An integer that tolerates strings, floats and other shapes (read as absent).
pub(crate) fn lenient_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<i64>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an integer")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(i64::try_from(v).ok())
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok((v.fract() == 0.0 && v.abs() < 9.0e15).then_some(v as i64))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(v.trim().parse().ok())
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
            while s.next_element::<IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
            while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

/// A string borrowed from the input when it has no escapes; any other shape reads as absent
/// (a custom resource's status may hold anything under a well-known name).
fn lenient_str<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'a, str>>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<Cow<'de, str>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Borrowed(v)))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v.to_string())))
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
            while s.next_element::<IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
            while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

/// A list whose elements of the wrong shape are skipped, and which reads as empty when it is
/// not a list at all, instead of failing the whole event.
fn lenient_list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct V<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list")
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = s.next_element::<Lenient<T>>()? {
                if let Lenient(Some(t)) = item {
                    out.push(t);
                }
            }
            Ok(out)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
            while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(Vec::new())
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
    }
    d.deserialize_any(V(std::marker::PhantomData))
}

/// An element that is read when it is an object and skipped otherwise, without buffering it:
/// the map is handed straight to `T`.
struct Lenient<T>(Option<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Lenient<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(|t| Lenient(Some(t)))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Lenient(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Lenient(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Lenient(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Lenient(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Lenient(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Lenient(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Lenient(None))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A string borrowed from the input when it has no escapes (serde's plain `Cow<str>` always
/// copies; only `#[serde(borrow)]` fields borrow).
pub(crate) struct CowStr<'a>(pub Cow<'a, str>);

impl<'de> Deserialize<'de> for CowStr<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CowStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A string (borrowed when it has no escapes), or `None` for a value of any other type, skipped
/// without being buffered.
struct StrOrSkip<'a>(Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for StrOrSkip<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrOrSkip<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(StrOrSkip(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(StrOrSkip(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(StrOrSkip(Some(Cow::Owned(v))))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(StrOrSkip(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(StrOrSkip(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(StrOrSkip(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(StrOrSkip(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(StrOrSkip(None))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(StrOrSkip(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(StrOrSkip(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// An optional string, borrowed from the input when it has no escapes: serde borrows only a
/// bare `Cow<str>` field, an `Option<Cow<str>>` would be copied into a fresh `String`.
pub(crate) fn opt_str<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'a, str>>, D::Error> {
    Ok(Option::<CowStr<'de>>::deserialize(d)?.map(|c| c.0))
}

fn count_list<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    Ok(lenient_list::<D, IgnoredAny>(d)?.len())
}

fn lenient_owner_refs<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<Vec<OwnerRef<'a>>, D::Error> {
    lenient_list(d)
}

fn lenient_conditions<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<Vec<Condition<'a>>, D::Error> {
    lenient_list(d)
}

/// Keeps only the `kausality.io/` annotations and those appliers mark objects with
/// ([`keeps_annotation`]); the others are skipped without copying.
fn kausality_annotations<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<StrPairs<'a>, D::Error> {
    filtered_string_map(d, keeps_annotation)
}

/// Annotation keys that pipelines' own appliers read (`[[applier]]`), beside the built-in
/// ones: kept for every pipeline of the process (a key kept but never asked for costs only
/// its copy), so a set that only grows.
static APPLIER_ANNOTATIONS: std::sync::RwLock<Vec<Box<str>>> = std::sync::RwLock::new(Vec::new());
static HAS_APPLIER_ANNOTATIONS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Keeps `keys` of annotations from now on (a pipeline's appliers).
pub fn keep_annotations(keys: &[String]) {
    if keys.is_empty() {
        return;
    }
    let mut kept = APPLIER_ANNOTATIONS.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    for k in keys {
        if !kept.iter().any(|x| **x == **k) {
            kept.push(Box::from(k.as_str()));
        }
    }
    HAS_APPLIER_ANNOTATIONS.store(true, std::sync::atomic::Ordering::Release);
}

/// Whether the decoder keeps the annotation `key`.
pub fn keeps_annotation(key: &str) -> bool {
    key.starts_with(ANNOTATION_PREFIX)
        || crate::config::appliers::BUILTIN_ANNOTATIONS.contains(&key)
        || (HAS_APPLIER_ANNOTATIONS.load(std::sync::atomic::Ordering::Acquire)
            && APPLIER_ANNOTATIONS
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .any(|k| &**k == key))
}

fn string_map<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<StrPairs<'a>, D::Error> {
    filtered_string_map(d, |_| true)
}

fn filtered_string_map<'de: 'a, 'a, D: Deserializer<'de>>(
    d: D,
    keep: fn(&str) -> bool,
) -> Result<StrPairs<'a>, D::Error> {
    struct V<'a> {
        keep: fn(&str) -> bool,
        _p: std::marker::PhantomData<&'a ()>,
    }
    impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
        type Value = StrPairs<'a>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of strings")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(CowStr(k)) = map.next_key::<CowStr<'de>>()? {
                if (self.keep)(&k) {
                    // A non-string value (invalid in Kubernetes) is skipped, not fatal, and
                    // without buffering it (an untagged enum would copy it, recursively).
                    if let StrOrSkip(Some(v)) = map.next_value::<StrOrSkip<'de>>()? {
                        out.push((k, v));
                    }
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(out)
        }
    }
    d.deserialize_any(V { keep, _p: std::marker::PhantomData })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_metadata_spec_status_and_other_fields() {
        let json = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"ns","uid":"u1",
            "resourceVersion":"42","generation":"3","annotations":{"a":"b","kausality.io/trace-ticket":"T-1","kausality.io/x":5},
            "ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"d","uid":"p1","controller":true}, 7]},
            "data":{"k":"v"},"status":{"observedGeneration":2,"conditions":[{"type":"Ready","status":"True"},"junk"]}}"#;
        let o: ObjectView = serde_json::from_str(json).unwrap();
        assert_eq!(o.kind.as_deref(), Some("ConfigMap"));
        assert_eq!(o.metadata.generation, Some(3));
        assert_eq!(o.metadata.annotations.len(), 1, "only kausality.io/ (and appliers') string annotations are kept");
        assert_eq!(o.metadata.annotation("kausality.io/trace-ticket"), Some("T-1"));
        assert_eq!(o.metadata.controller_ref().unwrap().uid.as_deref(), Some("p1"));
        assert_eq!(o.field("data").unwrap().get(), r#"{"k":"v"}"#);
        let st = StatusView::parse(o.status);
        assert_eq!(st.observed_generation, Some(2));
        assert!(st.condition_true("Ready"));
        assert_eq!(st.conditions.len(), 1);
    }

    #[test]
    fn strings_are_borrowed_unless_escaped() {
        let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a\u0062c","namespace":"ns","uid":null,
            "ownerReferences":[{"kind":"ReplicaSet","uid":"r\"1","controller":true}]}}"#;
        let o: ObjectView = serde_json::from_str(json).unwrap();
        assert!(matches!(o.kind, Some(Cow::Borrowed("Pod"))));
        assert!(matches!(o.metadata.namespace, Some(Cow::Borrowed("ns"))));
        assert!(
            matches!(&o.metadata.name, Some(Cow::Owned(n)) if n == "abc"),
            "an escape is decoded into an owned string"
        );
        assert_eq!(o.metadata.uid, None, "null reads as absent");
        let owner = &o.metadata.owner_references[0];
        assert!(matches!(owner.kind, Some(Cow::Borrowed("ReplicaSet"))));
        assert_eq!(owner.uid.as_deref(), Some("r\"1"));
        assert!(serde_json::from_str::<ObjectView>(r#"{"kind":5}"#).is_err(), "a number is not a kind");

        let json = r#"{"kind":"Event","auditID":"a1","stage":"ResponseComplete","verb":"update",
            "user":{"username":"sa"},"objectRef":{"resource":"pods","name":"p\u0031","namespace":null}}"#;
        let ev: crate::decode::AuditEvent = serde_json::from_str(json).unwrap();
        assert!(matches!(ev.audit_id, Some(Cow::Borrowed("a1"))));
        assert!(matches!(ev.verb, Some(Cow::Borrowed("update"))));
        assert!(matches!(ev.user.as_ref().unwrap().username, Some(Cow::Borrowed("sa"))));
        let oref = ev.object_ref.as_ref().unwrap();
        assert!(matches!(oref.resource, Some(Cow::Borrowed("pods"))));
        assert!(matches!(&oref.name, Some(Cow::Owned(n)) if n == "p1"));
        assert_eq!(oref.namespace, None);
    }

    #[test]
    fn odd_shapes_do_not_fail_the_object() {
        let json = r#"{"metadata":{"ownerReferences":null,"annotations":null,"generation":1.5},"status":"weird"}"#;
        let o: ObjectView = serde_json::from_str(json).unwrap();
        assert!(o.metadata.owner_references.is_empty());
        assert_eq!(o.metadata.generation, None);
        assert_eq!(StatusView::parse(o.status).observed_generation, None);
    }
}
