//! docs/audit-records.schema.json is what the `Event` types generate, and
//! every record of the fixture logs validates against it (a small validator
//! of the keywords schemars emits; an unknown keyword fails the test rather
//! than pass unchecked).

use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::common::read_lines;

fn docs_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/audit-records.schema.json")
}

#[test]
fn the_published_schema_is_the_generated_one() {
    let generated = tollgate_audit::schema::text();
    if std::env::var_os("TOLLGATE_WRITE_SCHEMA").is_some() {
        std::fs::write(docs_file(), &generated).unwrap();
    }
    let published = std::fs::read_to_string(docs_file()).unwrap_or_default();
    assert!(
        published == generated,
        "docs/audit-records.schema.json is stale: TOLLGATE_WRITE_SCHEMA=1 cargo test -p tollgate-audit --test audit schema"
    );
}

struct Validator<'a> {
    defs: &'a Map<String, Value>,
}

impl Validator<'_> {
    fn check(&self, s: &Value, v: &Value, at: &str) -> Result<(), String> {
        let Some(o) = s.as_object() else {
            return match s {
                Value::Bool(true) => Ok(()),
                _ => Err(format!("{at}: schema {s} refuses everything")),
            };
        };
        for (k, arg) in o {
            self.keyword(k, arg, o, v, at)?;
        }
        Ok(())
    }

    fn keyword(
        &self,
        k: &str,
        arg: &Value,
        o: &Map<String, Value>,
        v: &Value,
        at: &str,
    ) -> Result<(), String> {
        let fail = |why: String| Err(format!("{at}: {why}"));
        match k {
            "$ref" => {
                let name = arg
                    .as_str()
                    .and_then(|r| r.strip_prefix("#/$defs/"))
                    .unwrap_or("");
                let def = self
                    .defs
                    .get(name)
                    .ok_or(format!("{at}: no $defs/{name}"))?;
                self.check(def, v, at)
            }
            "type" => {
                let types: Vec<&str> = match arg {
                    Value::String(t) => vec![t.as_str()],
                    Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                    _ => vec![],
                };
                if types.iter().any(|t| is_type(t, v)) {
                    Ok(())
                } else {
                    fail(format!("{v} is not {types:?}"))
                }
            }
            "const" if v != arg => fail(format!("{v} is not {arg}")),
            "enum" if !arg.as_array().is_some_and(|a| a.contains(v)) => {
                fail(format!("{v} is not one of {arg}"))
            }
            "required" => {
                for r in arg
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                {
                    if v.is_object() && v.get(r).is_none() {
                        return fail(format!("`{r}` is missing"));
                    }
                }
                Ok(())
            }
            "properties" => {
                for (name, ps) in arg.as_object().into_iter().flatten() {
                    if let Some(x) = v.get(name).filter(|_| v.is_object()) {
                        self.check(ps, x, &format!("{at}.{name}"))?;
                    }
                }
                Ok(())
            }
            "additionalProperties" => {
                let named = o.get("properties").and_then(Value::as_object);
                for (name, x) in v.as_object().into_iter().flatten() {
                    if !named.is_some_and(|n| n.contains_key(name)) {
                        self.check(arg, x, &format!("{at}.{name}"))?;
                    }
                }
                Ok(())
            }
            "items" => {
                for (i, x) in v.as_array().into_iter().flatten().enumerate() {
                    self.check(arg, x, &format!("{at}[{i}]"))?;
                }
                Ok(())
            }
            "allOf" => {
                for s in arg.as_array().into_iter().flatten() {
                    self.check(s, v, at)?;
                }
                Ok(())
            }
            "anyOf" | "oneOf" => {
                let ok = arg
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|s| self.check(s, v, at).is_ok())
                    .count();
                match (k, ok) {
                    (_, 0) => fail(format!("{v} matches none of {k}")),
                    ("oneOf", n) if n > 1 => fail(format!("{v} matches {n} of oneOf")),
                    _ => Ok(()),
                }
            }
            "minimum" => match (v.as_f64(), arg.as_f64()) {
                (Some(x), Some(m)) if x < m => fail(format!("{x} < {m}")),
                _ => Ok(()),
            },
            "maximum" => match (v.as_f64(), arg.as_f64()) {
                (Some(x), Some(m)) if x > m => fail(format!("{x} > {m}")),
                _ => Ok(()),
            },
            "pattern" => {
                let re = regex_lite(arg.as_str().unwrap_or(""));
                match v.as_str() {
                    Some(s) if !re(s) => fail(format!("{s:?} does not match {arg}")),
                    _ => Ok(()),
                }
            }
            // Annotations, and keywords checked where they apply.
            "const" | "enum" | "description" | "title" | "format" | "default" | "$schema"
            | "$defs" | "examples" => Ok(()),
            other => fail(format!("the validator does not know `{other}`")),
        }
    }
}

/// The one pattern the schema uses: 64 lowercase hex digits.
fn regex_lite(p: &str) -> impl Fn(&str) -> bool {
    assert_eq!(p, "^[0-9a-f]{64}$", "a pattern the test does not know");
    |s: &str| {
        s.len() == 64
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }
}

fn is_type(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64(),
        _ => false,
    }
}

fn validate(schema: &Value, record: &Value) -> Result<(), String> {
    let empty = Map::new();
    let defs = schema
        .get("$defs")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    Validator { defs }.check(schema, record, "record")
}

#[test]
fn every_fixture_record_validates_and_a_wrong_one_does_not() {
    let schema = tollgate_audit::schema::schema();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/release-0.1.0/audit");
    let mut kinds = std::collections::BTreeSet::new();
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        for line in read_lines(&path) {
            let record: Value = serde_json::from_str(&line).unwrap();
            validate(&schema, &record)
                .unwrap_or_else(|e| panic!("{}: {e}\n{line}", path.display()));
            kinds.insert(record["event"].as_str().unwrap().to_string());
            n += 1;
        }
    }
    assert!(n > 50 && kinds.len() > 12, "{n} records, kinds {kinds:?}");
    // The schema refuses what the types refuse.
    let line = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .flat_map(|e| read_lines(&e.path()))
        .find(|l| l.contains("\"event\":\"permission_check\""))
        .unwrap();
    let mut bad: Value = serde_json::from_str(&line).unwrap();
    bad["decision"] = Value::String("maybe".into());
    assert!(validate(&schema, &bad).is_err());
    let mut unknown: Value = serde_json::from_str(&line).unwrap();
    unknown["event"] = Value::String("no_such_event".into());
    assert!(validate(&schema, &unknown).is_err());
    let mut no_hash: Value = serde_json::from_str(&line).unwrap();
    no_hash.as_object_mut().unwrap().remove("hash");
    assert!(validate(&schema, &no_hash).is_err());
}
