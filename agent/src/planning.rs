//! The planning tools: a todo list and a scratchpad that live in the agent's memory
//! for the session. They touch no host state, so they never go to the supervisor.
//!
//! The schemas the model sees come from the supervisor's `ListTools`; the argument
//! parsing here accepts the documented names and a few common spellings of them, and
//! answers anything else with a clear `Error: invalid arguments: …`.

use serde_json::{Map, Value};
use tollgate_toolcall::ToolName;

/// Most todo items kept.
pub const MAX_TODOS: usize = 200;
/// Longest todo item text, in characters.
pub const MAX_TODO_CHARS: usize = 4_096;
/// Largest scratchpad, in bytes.
pub const MAX_SCRATCHPAD_BYTES: usize = 64 * 1024;

/// A todo item's status: the typed arguments' own (what `todo_update`'s
/// schema offers is exactly what it accepts).
pub use tollgate_toolcall::TodoStatus;

fn parse_status(s: &str) -> Option<TodoStatus> {
    serde_json::from_value(Value::String(s.to_string())).ok()
}

fn mark(s: TodoStatus) -> &'static str {
    match s {
        TodoStatus::Pending => "[ ]",
        TodoStatus::InProgress => "[~]",
        TodoStatus::Done => "[x]",
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Todo {
    pub id: usize,
    pub text: String,
    pub status: TodoStatus,
}

/// The session's planning state.
#[derive(Debug, Default)]
pub struct Planning {
    todos: Vec<Todo>,
    scratchpad: String,
}

fn str_field<'a>(args: &'a Map<String, Value>, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|n| args.get(*n).and_then(Value::as_str))
}

fn item_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => {
            str_field(o, &["text", "content", "title", "task", "item"]).map(str::to_string)
        }
        _ => None,
    }
}

fn check_text(text: &str) -> Result<String, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("a todo item may not be empty".into());
    }
    if t.chars().count() > MAX_TODO_CHARS {
        return Err(format!(
            "a todo item is limited to {MAX_TODO_CHARS} characters"
        ));
    }
    Ok(t.to_string())
}

impl Planning {
    pub fn todos(&self) -> &[Todo] {
        &self.todos
    }

    /// The todo list as the model (and the user, with `/todos`) sees it.
    pub fn render_todos(&self) -> String {
        if self.todos.is_empty() {
            return "(the todo list is empty)".to_string();
        }
        self.todos
            .iter()
            .map(|t| format!("{}. {} {}", t.id, mark(t.status), t.text))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Runs one planning tool. `Ok` is the text for the model; `Err` is the reason
    /// the arguments were refused (the caller prefixes `Error: invalid arguments:`).
    pub fn call(&mut self, tool: ToolName, args: &Map<String, Value>) -> Result<String, String> {
        match tool {
            ToolName::TodoAppend => self.todo_append(args),
            ToolName::TodoList => Ok(self.render_todos()),
            ToolName::TodoUpdate => self.todo_update(args),
            ToolName::ReadScratchpad => Ok(if self.scratchpad.is_empty() {
                "(the scratchpad is empty)".to_string()
            } else {
                self.scratchpad.clone()
            }),
            ToolName::WriteScratchpad => self.write_scratchpad(args),
            ToolName::ReadFile
            | ToolName::GlobFiles
            | ToolName::Grep
            | ToolName::WriteFile
            | ToolName::EditFile
            | ToolName::RunBash
            | ToolName::JobOutput
            | ToolName::KillJob
            | ToolName::Webfetch
            | ToolName::Mcp
            | ToolName::AskQuestion => Err(format!("'{tool}' is not a planning tool")),
        }
    }

    fn todo_append(&mut self, args: &Map<String, Value>) -> Result<String, String> {
        let mut new: Vec<String> = Vec::new();
        if let Some(items) = args.get("items").or_else(|| args.get("todos")) {
            let Some(list) = items.as_array() else {
                return Err("`items` must be an array of strings".into());
            };
            for v in list {
                let Some(t) = item_text(v) else {
                    return Err("each entry of `items` must be a string".into());
                };
                new.push(check_text(&t)?);
            }
        } else if let Some(t) = str_field(args, &["item", "text", "content", "title", "task"]) {
            new.push(check_text(t)?);
        } else {
            return Err("expected `items` (an array of strings) or `item` (a string)".into());
        }
        if new.is_empty() {
            return Err("`items` is empty".into());
        }
        if self.todos.len() + new.len() > MAX_TODOS {
            return Err(format!("the todo list is limited to {MAX_TODOS} items"));
        }
        let n = new.len();
        for text in new {
            let id = self.todos.len() + 1;
            self.todos.push(Todo {
                id,
                text,
                status: TodoStatus::Pending,
            });
        }
        Ok(format!(
            "Added {n} item{}. Todo list:\n{}",
            if n == 1 { "" } else { "s" },
            self.render_todos()
        ))
    }

    fn todo_update(&mut self, args: &Map<String, Value>) -> Result<String, String> {
        let id_value = args
            .get("id")
            .or_else(|| args.get("index"))
            .or_else(|| args.get("number"))
            .ok_or("expected `id`, the number of the item to update")?;
        let id = match id_value {
            Value::Number(n) => n.as_u64().map(|n| n as usize),
            Value::String(s) => s.trim().parse::<usize>().ok(),
            _ => None,
        }
        .ok_or("`id` must be a positive whole number")?;
        let status = match args.get("status") {
            Some(Value::String(s)) => Some(parse_status(s).ok_or_else(|| {
                format!("unknown status '{s}': use pending, in_progress or done")
            })?),
            Some(_) => return Err("`status` must be a string".into()),
            None => match args.get("done") {
                Some(Value::Bool(true)) => Some(TodoStatus::Done),
                Some(Value::Bool(false)) => Some(TodoStatus::Pending),
                _ => None,
            },
        };
        let text = match str_field(args, &["text", "content", "title"]) {
            Some(t) => Some(check_text(t)?),
            None => None,
        };
        if status.is_none() && text.is_none() {
            return Err("expected `status` and/or `text` to change".into());
        }
        let count = self.todos.len();
        let todo = self
            .todos
            .iter_mut()
            .find(|t| t.id == id)
            .ok_or_else(|| format!("there is no todo item {id} (the list has {count})"))?;
        if let Some(s) = status {
            todo.status = s;
        }
        if let Some(t) = text {
            todo.text = t;
        }
        Ok(format!(
            "Updated item {id}. Todo list:\n{}",
            self.render_todos()
        ))
    }

    fn write_scratchpad(&mut self, args: &Map<String, Value>) -> Result<String, String> {
        let content =
            str_field(args, &["content", "text", "notes"]).ok_or("expected `content`, a string")?;
        let append = matches!(args.get("append"), Some(Value::Bool(true)))
            || matches!(args.get("mode"), Some(Value::String(m)) if m == "append");
        let new_len = if append {
            self.scratchpad.len() + content.len()
        } else {
            content.len()
        };
        if new_len > MAX_SCRATCHPAD_BYTES {
            return Err(format!(
                "the scratchpad is limited to {MAX_SCRATCHPAD_BYTES} bytes"
            ));
        }
        if append {
            self.scratchpad.push_str(content);
        } else {
            self.scratchpad = content.to_string();
        }
        Ok(format!(
            "Scratchpad saved ({} characters).",
            self.scratchpad.chars().count()
        ))
    }
}

/// The question of an `ask_question` call.
pub fn question_of(args: &Map<String, Value>) -> Result<String, String> {
    let q = str_field(args, &["question", "prompt", "text"])
        .ok_or("expected `question`, a string")?
        .trim();
    if q.is_empty() {
        return Err("`question` may not be empty".into());
    }
    Ok(q.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn todo_round_trip() {
        let mut p = Planning::default();
        assert_eq!(
            p.call(ToolName::TodoList, &Map::new()).unwrap(),
            "(the todo list is empty)"
        );
        assert_eq!(
            p.call(
                ToolName::TodoAppend,
                &obj(json!({"items": ["read code", "fix bug"]}))
            )
            .unwrap(),
            "Added 2 items. Todo list:\n1. [ ] read code\n2. [ ] fix bug"
        );
        p.call(ToolName::TodoAppend, &obj(json!({"item": "  run tests "})))
            .unwrap();
        assert_eq!(
            p.call(
                ToolName::TodoUpdate,
                &obj(json!({"id": 1, "status": "done"}))
            )
            .unwrap(),
            "Updated item 1. Todo list:\n1. [x] read code\n2. [ ] fix bug\n3. [ ] run tests"
        );
        p.call(
            ToolName::TodoUpdate,
            &obj(json!({"id": "2", "status": "in_progress"})),
        )
        .unwrap();
        assert_eq!(
            p.render_todos(),
            "1. [x] read code\n2. [~] fix bug\n3. [ ] run tests"
        );
    }

    #[test]
    fn todo_errors_are_clear() {
        let mut p = Planning::default();
        assert_eq!(
            p.call(
                ToolName::TodoUpdate,
                &obj(json!({"id": 4, "status": "done"}))
            ),
            Err("there is no todo item 4 (the list has 0)".into())
        );
        assert_eq!(
            p.call(ToolName::TodoAppend, &obj(json!({"items": "x"}))),
            Err("`items` must be an array of strings".into())
        );
        assert_eq!(
            p.call(ToolName::TodoAppend, &obj(json!({"items": [""]}))),
            Err("a todo item may not be empty".into())
        );
        p.call(ToolName::TodoAppend, &obj(json!({"item": "a"})))
            .unwrap();
        assert_eq!(
            p.call(
                ToolName::TodoUpdate,
                &obj(json!({"id": 1, "status": "maybe"}))
            ),
            Err("unknown status 'maybe': use pending, in_progress or done".into())
        );
        let many: Vec<String> = (0..MAX_TODOS).map(|i| i.to_string()).collect();
        assert!(
            p.call(ToolName::TodoAppend, &obj(json!({ "items": many })))
                .is_err()
        );
    }

    #[test]
    fn scratchpad() {
        let mut p = Planning::default();
        assert_eq!(
            p.call(ToolName::ReadScratchpad, &Map::new()).unwrap(),
            "(the scratchpad is empty)"
        );
        p.call(ToolName::WriteScratchpad, &obj(json!({"content": "a"})))
            .unwrap();
        p.call(
            ToolName::WriteScratchpad,
            &obj(json!({"content": "b", "append": true})),
        )
        .unwrap();
        assert_eq!(p.call(ToolName::ReadScratchpad, &Map::new()).unwrap(), "ab");
        p.call(ToolName::WriteScratchpad, &obj(json!({"content": "c"})))
            .unwrap();
        assert_eq!(p.call(ToolName::ReadScratchpad, &Map::new()).unwrap(), "c");
        let big = "x".repeat(MAX_SCRATCHPAD_BYTES + 1);
        assert!(
            p.call(ToolName::WriteScratchpad, &obj(json!({ "content": big })))
                .is_err()
        );
    }

    #[test]
    fn questions() {
        assert_eq!(
            question_of(&obj(json!({"question": " Which branch? "}))),
            Ok("Which branch?".into())
        );
        assert!(question_of(&obj(json!({"q": "x"}))).is_err());
        let local = |name: &str| ToolName::parse(name).is_some_and(|t| t.facts().runs_in_agent());
        assert!(local("ask_question") && !local("read_file"));
        assert!(!local("no_such_tool"));
    }
}
