// Package config is the ratesync node's configuration: the Config type
// (the YAML file's shape, tagged), Load (flags, then the file, then the
// environment for secrets), defaults, validation and the effective
// configuration with its secrets masked (Masked).
//
// A file that does not load gets every error at once, each as
// "file:line: field.path: value: what is allowed": yaml.go checks the
// file's shape (unknown or repeated fields, kinds, allowed values) and
// remembers each field's line; validate.go runs the rules, which live in
// the packages that own them (namespace.Config.Validate, the stores'
// Config.Validate, middleware.Policy.Validate, rls.LoadPath) and only names
// the field. The package opens nothing: connecting to stores and serving
// are package node's.
package config
