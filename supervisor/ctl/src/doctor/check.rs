//! One line of `doctor`: a name, `ok` / `warn` / `fail`, what was found and,
//! when it is not ok, a hint (docs/INTERFACES.md "doctor").

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
    pub hint: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    pub const ALL: [Status; 3] = [Status::Ok, Status::Warn, Status::Fail];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }

    /// The status `as_str` names.
    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

pub fn check(name: &str, status: Status, detail: String, hint: Option<&str>) -> Check {
    Check {
        name: name.to_string(),
        status,
        detail,
        hint: hint.map(str::to_string),
    }
}
