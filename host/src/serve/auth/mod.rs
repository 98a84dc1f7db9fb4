//! Who is calling, and what they may do: API tokens (`Authorization: Bearer
//! lbx_…`) and dashboard sessions (a cookie made by signing in with a token),
//! each belonging to one tenant with one role.
//!
//! - [`secret`]: minting, hashing and comparing the secrets (constant time).
//! - [`session`]: the session cookie and the CSRF token a cookie-borne request
//!   that changes something must carry.
//!
//! Roles rank `viewer` < `operator` < `approver` < `admin`: a viewer reads; an
//! operator also starts, cancels, resumes, answers and ticks runs; an approver
//! also approves and denies; an admin also manages its tenant's tokens and config.

pub mod secret;
pub mod session;

use serde::{Deserialize, Serialize};

/// A token's role within its tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Operator,
    Approver,
    Admin,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Viewer, Role::Operator, Role::Approver, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Approver => "approver",
            Role::Admin => "admin",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Role, String> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("`{s}` is not a role: give viewer, operator, approver or admin"))
    }
}

/// How a caller proved who it is.
#[derive(Debug, Clone)]
pub enum Via {
    /// An `Authorization: Bearer` token: nothing a browser sends by itself.
    Bearer,
    /// A session cookie, which a browser sends by itself: a request that changes
    /// something must also carry the session's CSRF token.
    Session { id: String, csrf: String },
}

/// The caller of a request: a token of one tenant, with its role.
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant: String,
    pub role: Role,
    /// The token's name, unique in its tenant among live tokens.
    pub name: String,
    /// The token's id (its session's too, for a cookie).
    pub token_id: String,
    pub via: Via,
}

impl Caller {
    /// How the caller is named in the audit log and as a run's starter: `TENANT/NAME`.
    pub fn actor(&self) -> String {
        format!("{}/{}", self.tenant, self.name)
    }

    /// Ok when the caller's role is `needed` or above; `Err` says who it is and what `act` needs.
    pub fn may(&self, needed: Role, act: &str) -> Result<(), String> {
        if self.role >= needed {
            Ok(())
        } else {
            Err(format!(
                "token `{}` has the {} role; to {act} it needs the {needed} role or above (an admin of tenant `{}` makes tokens with POST /api/v1/tokens)",
                self.actor(),
                self.role,
                self.tenant
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_rank_and_a_low_one_is_told_what_it_lacks() {
        assert!(Role::Viewer < Role::Operator && Role::Approver < Role::Admin);
        let c = Caller {
            tenant: "alpha".into(),
            role: Role::Operator,
            name: "ci".into(),
            token_id: "0".into(),
            via: Via::Bearer,
        };
        assert!(
            c.may(Role::Viewer, "read").is_ok() && c.may(Role::Operator, "start a run").is_ok()
        );
        let e = c.may(Role::Approver, "approve").unwrap_err();
        assert!(
            e.starts_with(
                "token `alpha/ci` has the operator role; to approve it needs the approver role"
            ),
            "{e}"
        );
        assert_eq!("admin".parse::<Role>(), Ok(Role::Admin));
        assert!("root".parse::<Role>().unwrap_err().contains("not a role"));
    }
}
