package oidcprovider

import (
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// Audience is the audience the tests' tokens are issued for.
const Audience = "tenant"

// Authenticators are the three issuers the identity tests give a tenant,
// for providers at a, b and c, each with its CA in an object of the
// tenant's namespace:
//   - a: user "a:" + sub, groups "a:" + groups, only claims.tier "gold"
//     (message "gold members only"); CA in ConfigMap issuer-a-ca, ca.crt;
//   - b: user and groups by CEL ("b:" + email, "b:" + team), uid sub,
//     email_verified required (upstream wants it where the name is the
//     email); CA in Secret issuer-b-ca, ca.crt;
//   - c: user "c:" + sub; CA in ConfigMap issuer-c-ca, key bundle.pem.
func Authenticators(a, b, c string) (v1alpha1.JWTAuthenticator, v1alpha1.JWTAuthenticator, v1alpha1.JWTAuthenticator) {
	jwtA := v1alpha1.JWTAuthenticator{
		Issuer: v1alpha1.JWTIssuer{URL: a, Audiences: []string{Audience},
			CertificateAuthorityRef: &v1alpha1.CertificateAuthorityRef{ConfigMapName: "issuer-a-ca"}},
		ClaimValidationRules: []v1alpha1.ClaimValidationRule{{Expression: `claims.tier == "gold"`, Message: "gold members only"}},
		ClaimMappings: v1alpha1.ClaimMappings{
			Username: v1alpha1.PrefixedClaimOrExpression{Claim: "sub", Prefix: ptr.To("a:")},
			Groups:   v1alpha1.PrefixedClaimOrExpression{Claim: "groups", Prefix: ptr.To("a:")},
		},
	}
	jwtB := v1alpha1.JWTAuthenticator{
		Issuer: v1alpha1.JWTIssuer{URL: b, Audiences: []string{Audience},
			CertificateAuthorityRef: &v1alpha1.CertificateAuthorityRef{SecretName: "issuer-b-ca"}},
		ClaimValidationRules: []v1alpha1.ClaimValidationRule{{Expression: "claims.email_verified == true", Message: "the email is not verified"}},
		ClaimMappings: v1alpha1.ClaimMappings{
			Username: v1alpha1.PrefixedClaimOrExpression{Expression: "'b:' + claims.email"},
			Groups:   v1alpha1.PrefixedClaimOrExpression{Expression: "'b:' + claims.team"},
			UID:      v1alpha1.ClaimOrExpression{Claim: "sub"},
		},
	}
	jwtC := v1alpha1.JWTAuthenticator{
		Issuer: v1alpha1.JWTIssuer{URL: c, Audiences: []string{Audience},
			CertificateAuthorityRef: &v1alpha1.CertificateAuthorityRef{ConfigMapName: "issuer-c-ca", Key: "bundle.pem"}},
		ClaimMappings: v1alpha1.ClaimMappings{Username: v1alpha1.PrefixedClaimOrExpression{Claim: "sub", Prefix: ptr.To("c:")}},
	}
	return jwtA, jwtB, jwtC
}
