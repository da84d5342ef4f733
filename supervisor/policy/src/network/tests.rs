use std::net::IpAddr;

use super::*;

fn policy(allow: &[&str], deny: &[&str], unlisted: Unlisted) -> NetworkPolicy {
    NetworkPolicy::from_config(&NetworkConfig {
        allow: allow.iter().map(|s| s.to_string()).collect(),
        deny: deny.iter().map(|s| s.to_string()).collect(),
        unlisted,
        allow_private: vec![],
        ..NetworkConfig::default()
    })
    .unwrap()
}

fn host(s: &str) -> NetHost {
    NetHost::parse(s).unwrap()
}

fn verdict(p: &NetworkPolicy, h: &str, port: u16) -> NetVerdict {
    p.decide(&host(h), port).verdict
}

#[test]
fn exact_names_default_to_https_and_http() {
    let p = policy(&["Example.ORG."], &[], Unlisted::Deny);
    assert_eq!(verdict(&p, "example.org", 443), NetVerdict::Allow);
    assert_eq!(verdict(&p, "EXAMPLE.org.", 80), NetVerdict::Allow);
    assert_eq!(verdict(&p, "example.org", 22), NetVerdict::Deny);
    assert_eq!(verdict(&p, "www.example.org", 443), NetVerdict::Deny);
    let d = p.decide(&host("example.org"), 443);
    assert_eq!(d.rule, "Example.ORG.");
}

#[test]
fn a_wildcard_matches_subdomains_only() {
    let p = policy(&["*.example.org"], &[], Unlisted::Deny);
    assert_eq!(verdict(&p, "a.example.org", 443), NetVerdict::Allow);
    assert_eq!(verdict(&p, "a.b.example.org", 80), NetVerdict::Allow);
    assert_eq!(verdict(&p, "example.org", 443), NetVerdict::Deny);
    assert_eq!(verdict(&p, "evilexample.org", 443), NetVerdict::Deny);
    assert_eq!(verdict(&p, "example.org.evil.net", 443), NetVerdict::Deny);
}

#[test]
fn deny_is_checked_first_and_an_explicit_port_is_the_only_port() {
    let p = policy(
        &["*.example.org", "git.example.net:22"],
        &["upload.example.org"],
        Unlisted::Deny,
    );
    let d = p.decide(&host("upload.example.org"), 443);
    assert_eq!(d.verdict, NetVerdict::Deny);
    assert_eq!(d.rule, "upload.example.org");
    assert!(d.reason.contains("[network] deny"), "{}", d.reason);
    assert_eq!(verdict(&p, "git.example.net", 22), NetVerdict::Allow);
    assert_eq!(verdict(&p, "git.example.net", 443), NetVerdict::Deny);
}

#[test]
fn unlisted_hosts_are_refused_or_asked_naming_the_rule() {
    let d = policy(&[], &[], Unlisted::Deny).decide(&host("evil.example"), 443);
    assert_eq!(d.verdict, NetVerdict::Deny);
    assert_eq!(d.rule, UNLISTED_RULE);
    assert_eq!(d.reason, "evil.example:443 is not in [network] allow");
    let d = policy(&[], &[], Unlisted::Ask).decide(&host("evil.example"), 443);
    assert_eq!(d.verdict, NetVerdict::Ask);
}

#[test]
fn idna_puts_unicode_and_punycode_in_one_form_and_homoglyphs_apart() {
    let p = policy(&["bücher.example"], &[], Unlisted::Deny);
    assert_eq!(verdict(&p, "xn--bcher-kva.example", 443), NetVerdict::Allow);
    assert_eq!(verdict(&p, "BÜCHER.example", 443), NetVerdict::Allow);
    // Cyrillic "е" and "а" look like Latin ones; they are another name.
    let p = policy(&["example.org"], &[], Unlisted::Deny);
    let homoglyph = host("\u{0435}x\u{0430}mple.org");
    assert_ne!(homoglyph, host("example.org"));
    assert!(homoglyph.to_string().starts_with("xn--"), "{homoglyph}");
    assert_eq!(p.decide(&homoglyph, 443).verdict, NetVerdict::Deny);
    assert!(NetHost::parse("xn--zz").is_err(), "invalid punycode");
}

#[test]
fn numeric_spellings_are_addresses_not_names() {
    let loopback: IpAddr = [127, 0, 0, 1].into();
    for spelling in ["0x7f.1", "127.1", "2130706433", "0177.0.0.1", "0x7f000001"] {
        assert_eq!(host(spelling), NetHost::Ip(loopback), "{spelling}");
    }
    // An allowed name never matches its numeric spelling, and an address
    // entry matches every spelling of it.
    let p = policy(&["localhost", "93.184.216.34:80"], &[], Unlisted::Deny);
    assert_eq!(verdict(&p, "0x7f.1", 443), NetVerdict::Deny);
    assert_eq!(verdict(&p, "0x5db8d822", 80), NetVerdict::Allow);
    assert_eq!(
        host("[::ffff:127.0.0.1]"),
        NetHost::Ip("::ffff:127.0.0.1".parse().unwrap())
    );
    let p = policy(&["[2001:db8::1]:8443", "2001:db8::2"], &[], Unlisted::Deny);
    assert_eq!(verdict(&p, "[2001:db8::1]", 8443), NetVerdict::Allow);
    assert_eq!(verdict(&p, "2001:db8::2", 443), NetVerdict::Allow);
}

#[test]
fn long_and_malformed_names_are_refused() {
    let label = "a".repeat(63);
    let long = [label.as_str(); 5].join(".");
    assert!(long.len() > 253);
    let e = NetHost::parse(&long).unwrap_err();
    assert!(e.contains("253"), "{e}");
    let e = NetHost::parse(&"a".repeat(300)).unwrap_err();
    assert!(e.contains("300 bytes"), "{e}");
    let e = NetHost::parse(&format!("{}.example", "b".repeat(64))).unwrap_err();
    assert!(e.contains("not a valid DNS name"), "{e}");
    for bad in [
        "",
        "a..b",
        "-a.example",
        "a-.example",
        "exa_mple.com",
        "a b",
        "a\nb",
        "host:80",
        "a/b",
        "user@host",
    ] {
        assert!(NetHost::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn bad_entries_are_refused_naming_the_key_and_index() {
    for (key, bad) in [
        ("allow", "*"),
        ("allow", "*.com"),
        ("allow", "a.*.example"),
        ("allow", "*example.org"),
        ("allow", "example.org:0"),
        ("allow", "example.org:65536"),
        ("allow", "example.org:+80"),
        ("allow", "https://example.org"),
        ("deny", "exa mple.org"),
        ("deny", "[::1"),
    ] {
        let mut c = NetworkConfig::default();
        let list = if key == "allow" {
            &mut c.allow
        } else {
            &mut c.deny
        };
        list.push("ok.example".to_string());
        list.push(bad.to_string());
        let e = NetworkPolicy::from_config(&c).unwrap_err();
        assert!(e.starts_with(&format!("[network] {key}[1] ")), "{bad}: {e}");
        assert!(e.contains("hint"), "{bad}: {e}");
    }
    let c = NetworkConfig {
        allow: (0..=MAX_NET_RULES)
            .map(|i| format!("h{i}.example"))
            .collect(),
        ..NetworkConfig::default()
    };
    assert!(
        NetworkPolicy::from_config(&c)
            .unwrap_err()
            .contains("at most")
    );
}

#[test]
fn allow_private_admits_listed_ranges_and_never_loopback() {
    let c = NetworkConfig {
        allow: vec!["mirror.corp.example".to_string()],
        allow_private: vec!["10.20.0.0/16".to_string(), "203.0.113.7".to_string()],
        ..NetworkConfig::default()
    };
    let p = NetworkPolicy::from_config(&c).unwrap();
    let own = HostAddrs::none();
    let ok = |s: &str| p.vet_address(s.parse().unwrap(), own, "mirror.corp.example");
    assert!(ok("10.20.3.4").is_ok());
    assert!(ok("203.0.113.7").is_ok());
    assert!(
        ok("::ffff:10.20.3.4").is_ok(),
        "an IPv4-mapped address is its IPv4 address"
    );
    let e = ok("10.21.0.1").unwrap_err();
    assert!(
        e.contains("`mirror.corp.example` resolves to 10.21.0.1"),
        "{e}"
    );
    assert!(ok("127.0.0.1").is_err());
    assert!(ok("169.254.169.254").is_err());
    assert!(ok("93.184.216.34").is_ok());
    for bad in [
        "127.0.0.0/8",
        "0.0.0.0/0",
        "::1",
        "::/0",
        "0.0.0.0/1",
        "ten",
    ] {
        let c = NetworkConfig {
            allow_private: vec![bad.to_string()],
            ..NetworkConfig::default()
        };
        let e = NetworkPolicy::from_config(&c).unwrap_err();
        assert!(e.starts_with("[network] allow_private[0]"), "{bad}: {e}");
    }
}

#[test]
fn the_host_addresses_are_refused_too() {
    let p = policy(&["self.example"], &[], Unlisted::Deny);
    let own = HostAddrs::new([("93.184.216.9".parse().unwrap(), "eth0".to_string())]);
    let e = p
        .vet_address("93.184.216.9".parse().unwrap(), &own, "self.example")
        .unwrap_err();
    assert!(e.contains("eth0"), "{e}");
}

fn overlay_add(o: &mut NetOverlay, p: &NetworkPolicy, verb: OverlayVerb, spec: &str) {
    o.add(p, verb, spec).unwrap();
}

#[test]
fn an_operator_overlay_is_checked_after_the_supervisors_deny_and_before_unlisted() {
    let p = policy(&["*.example.org"], &["upload.example.org"], Unlisted::Ask);
    let mut o = NetOverlay::default();
    let d = |o: &NetOverlay, h: &str, port: u16| p.decide_with(o, &host(h), port);
    assert_eq!(d(&o, "new.example", 443).verdict, NetVerdict::Ask);
    overlay_add(&mut o, &p, OverlayVerb::Allow, "new.example");
    let a = d(&o, "NEW.example.", 443);
    assert_eq!(
        (a.verdict, a.rule.as_str()),
        (NetVerdict::Allow, "operator:net allow new.example")
    );
    assert_eq!(d(&o, "new.example", 22).verdict, NetVerdict::Ask);
    // An operator's denial beats the supervisor's allow ...
    overlay_add(&mut o, &p, OverlayVerb::Deny, "a.example.org");
    let a = d(&o, "a.example.org", 443);
    assert_eq!(
        (a.verdict, a.rule.as_str()),
        (NetVerdict::Deny, "operator:net deny a.example.org")
    );
    assert_eq!(d(&o, "b.example.org", 443).verdict, NetVerdict::Allow);
    // ... and the supervisor's deny beats an operator's allowance, which is
    // refused up front for a name the deny list names.
    let e = o
        .add(&p, OverlayVerb::Allow, "upload.example.org")
        .unwrap_err();
    assert!(
        e.contains("[network] deny entry \"upload.example.org\""),
        "{e}"
    );
    overlay_add(&mut o, &p, OverlayVerb::Allow, "*.example.org");
    assert_eq!(
        d(&o, "upload.example.org", 443).rule,
        "upload.example.org",
        "deny first, whatever the operator added"
    );
    // The same entry moves from one list to the other.
    overlay_add(&mut o, &p, OverlayVerb::Deny, "new.example");
    assert_eq!(d(&o, "new.example", 443).verdict, NetVerdict::Deny);
    assert!(o.allow.iter().all(|r| r.text != "new.example"));
    assert!(o.add(&p, OverlayVerb::Allow, "*.com").is_err());
    assert!(o.add(&p, OverlayVerb::Deny, "a b").is_err());
}

#[test]
fn ask_is_refused_never_granted_where_no_person_answers() {
    use crate::Mode;
    assert!(ask_allowed_in(Mode::Default).is_ok());
    assert!(ask_allowed_in(Mode::AcceptEdits).is_ok());
    let e = ask_allowed_in(Mode::DangerouslySkipPermissions).unwrap_err();
    assert!(e.contains("refused, never granted"), "{e}");
    assert!(ask_allowed_in(Mode::DontAsk).is_err());
    assert!(ask_allowed_in(Mode::Plan).is_err());
}

#[test]
fn trailing_dots_case_and_idna_are_one_name_for_the_deny_list_too() {
    let p = policy(&["*.example.org"], &["Upload.Example.ORG."], Unlisted::Deny);
    for spelling in [
        "upload.example.org",
        "UPLOAD.example.org.",
        "\u{FF55}pload.example.org",
    ] {
        assert_eq!(verdict(&p, spelling, 443), NetVerdict::Deny, "{spelling}");
    }
    let p = policy(&["münchen.example"], &[], Unlisted::Deny);
    assert_eq!(
        verdict(&p, "xn--mnchen-3ya.example.", 443),
        NetVerdict::Allow
    );
    assert_eq!(verdict(&p, "MÜNCHEN.EXAMPLE", 80), NetVerdict::Allow);
    assert_eq!(verdict(&p, "munchen.example", 443), NetVerdict::Deny);
}
