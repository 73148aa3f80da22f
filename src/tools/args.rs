//! Reading a tool's JSON arguments with errors a model can act on.
//!
//! Models get argument shapes wrong now and then (a missing field, a number sent as a
//! string). Each error names the tool, the argument and what was expected, so the next
//! call can be right. Missing and `null` mean the same: models often send `null` for an
//! optional argument they do not use. Unknown fields are ignored.

use serde_json::{Map, Value};

/// The argument object of one call.
pub(super) struct Args<'a> {
    tool: &'static str,
    fields: Option<&'a Map<String, Value>>,
}

impl<'a> Args<'a> {
    /// Accepts an object, or `null` for a call without arguments.
    pub(super) fn new(tool: &'static str, value: &'a Value) -> Result<Self, String> {
        match value {
            Value::Object(fields) => Ok(Self {
                tool,
                fields: Some(fields),
            }),
            Value::Null => Ok(Self { tool, fields: None }),
            other => Err(format!(
                "{tool}: arguments must be a JSON object, got {}",
                kind(other)
            )),
        }
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.fields
            .and_then(|fields| fields.get(name))
            .filter(|value| !value.is_null())
    }

    pub(super) fn required_str(&self, name: &str) -> Result<&'a str, String> {
        self.optional_str(name)?
            .ok_or_else(|| format!("{}: missing required argument \"{name}\"", self.tool))
    }

    pub(super) fn optional_str(&self, name: &str) -> Result<Option<&'a str>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(other) => Err(format!(
                "{}: argument \"{name}\" must be a string, got {}",
                self.tool,
                kind(other)
            )),
        }
    }

    /// A boolean. `"true"`/`"false"` strings are refused like `"10"` for integers.
    pub(super) fn optional_bool(&self, name: &str) -> Result<Option<bool>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(flag)) => Ok(Some(*flag)),
            Some(other) => Err(format!(
                "{}: argument \"{name}\" must be a boolean, got {}",
                self.tool,
                kind(other)
            )),
        }
    }

    /// A non-negative integer. `10.0` is accepted (some models emit floats); `"10"` is
    /// not, to keep the schema honest.
    pub(super) fn optional_u64(&self, name: &str) -> Result<Option<u64>, String> {
        let Some(value) = self.get(name) else {
            return Ok(None);
        };
        let number = value.as_u64().or_else(|| {
            value
                .as_f64()
                .filter(|float| float.fract() == 0.0 && *float >= 0.0 && *float <= u64::MAX as f64)
                .map(|float| float as u64)
        });
        number.map(Some).ok_or_else(|| {
            format!(
                "{}: argument \"{name}\" must be a non-negative integer, got {}",
                self.tool,
                kind(value)
            )
        })
    }
}

/// Names a JSON value for an error message, including short scalars themselves.
fn kind(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(flag) => format!("boolean {flag}"),
        Value::Number(number) => format!("number {number}"),
        Value::String(text) if text.chars().count() <= 40 => format!("string {text:?}"),
        Value::String(_) => "a string".to_owned(),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_strings_and_integers() {
        let value = json!({"path": "a.txt", "offset": 3, "limit": 5.0, "glob": null});
        let args = Args::new("t", &value).unwrap();
        assert_eq!(args.required_str("path").unwrap(), "a.txt");
        assert_eq!(args.optional_u64("offset").unwrap(), Some(3));
        assert_eq!(args.optional_u64("limit").unwrap(), Some(5));
        assert_eq!(args.optional_str("glob").unwrap(), None);
        assert_eq!(args.optional_u64("missing").unwrap(), None);
    }

    #[test]
    fn explains_bad_arguments() {
        let value = json!({"path": 7, "offset": "10", "limit": -1});
        let args = Args::new("t", &value).unwrap();
        assert_eq!(
            args.required_str("path").unwrap_err(),
            "t: argument \"path\" must be a string, got number 7"
        );
        assert_eq!(
            args.optional_u64("offset").unwrap_err(),
            "t: argument \"offset\" must be a non-negative integer, got string \"10\""
        );
        assert!(
            args.optional_u64("limit")
                .unwrap_err()
                .contains("got number -1")
        );
        assert_eq!(
            args.required_str("other").unwrap_err(),
            "t: missing required argument \"other\""
        );
        let flags = json!({"yes": true, "no": "false"});
        let flags = Args::new("t", &flags).unwrap();
        assert_eq!(flags.optional_bool("yes").unwrap(), Some(true));
        assert_eq!(flags.optional_bool("missing").unwrap(), None);
        assert_eq!(
            flags.optional_bool("no").unwrap_err(),
            "t: argument \"no\" must be a boolean, got string \"false\""
        );
        let missing = Args::new("t", &Value::Null).unwrap();
        assert!(missing.required_str("path").is_err());
        assert_eq!(
            Args::new("t", &json!([1])).err().unwrap(),
            "t: arguments must be a JSON object, got an array"
        );
    }
}
