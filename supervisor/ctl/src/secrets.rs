//! `secrets list`: the configured `[[secrets]]`, their bound hosts and use
//! counts; the supervisor never sends a value (docs/INTERFACES.md).

use serde_json::{Value, json};
use tollgate_proto::v1 as pb;

use crate::client::{Client, status_error};
use crate::table;

fn secret_json(s: &pb::SecretInfo) -> Value {
    json!({
        "name": s.name, "hosts": s.hosts, "env": s.env, "header": s.header,
        "owners": s.owners, "uses": s.uses, "stripped": s.stripped,
    })
}

pub async fn list(mut c: Client, json_out: bool) -> anyhow::Result<()> {
    let list = c
        .list_secrets(pb::ListSecretsRequest {})
        .await
        .map_err(status_error)?
        .into_inner()
        .secrets;
    if json_out {
        outln!("{}", Value::Array(list.iter().map(secret_json).collect()));
        return Ok(());
    }
    if list.is_empty() {
        outln!("no secrets configured ([[secrets]] in the supervisor's config)");
        return Ok(());
    }
    let dash = |s: &str| {
        if s.is_empty() {
            "-".to_string()
        } else {
            table::escape(s)
        }
    };
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|s| {
            vec![
                table::escape(&s.name),
                table::escape(&s.hosts.join(",")),
                dash(&s.env),
                dash(&s.header),
                if s.owners.is_empty() {
                    "*".to_string()
                } else {
                    table::escape(&s.owners.join(","))
                },
                s.uses.to_string(),
                s.stripped.to_string(),
            ]
        })
        .collect();
    table::print(
        &[
            "SECRET", "HOSTS", "ENV", "HEADER", "OWNERS", "USES", "STRIPPED",
        ],
        &rows,
    );
    Ok(())
}
