package main

import (
	"bytes"
	"fmt"
	"path"
	"regexp"
	"strings"
	"text/template"
)

// The krew plugin manifest template (.krew.yaml at the repository's root)
// is written for krew-release-bot, which krew plugins commonly use to
// propose each release to krew-index, so that either can fill it:
//
//   - {{ .TagName }} is the release's tag, {{ .Version }} its numbers
//     without the v;
//   - {{ addURIAndSha "URL" .TagName }} renders URL (itself a template
//     with the same two values) and becomes `uri: URL` and, on the next
//     line, indented by four spaces, `sha256: <the archive's SHA-256>`;
//   - {{ indent N "text" }} indents text's lines by N spaces.
//
// The bot downloads each URL to hash it; dist hashes the archive it just
// wrote under the URL's last path element, and refuses a URL naming
// another.

// missingArchiveError is a template URL naming an archive that was not
// built.
type missingArchiveError struct{ name string }

func (e *missingArchiveError) Error() string {
	return fmt.Sprintf("no archive %s was built", e.name)
}

// fillKrewTemplate executes the template for the release tag, with the
// SHA-256 of each archive by file name.
func fillKrewTemplate(tmpl []byte, tag string, archives map[string]string) ([]byte, error) {
	values := krewValues{TagName: tag, Version: versionOf(tag)}
	funcs := template.FuncMap{
		"addURIAndSha": func(url, tag string) (string, error) {
			u, err := template.New("url").Option("missingkey=error").Parse(url)
			if err != nil {
				return "", err
			}
			var buf bytes.Buffer
			if err := u.Execute(&buf, krewValues{TagName: tag, Version: versionOf(tag)}); err != nil {
				return "", err
			}
			name := path.Base(buf.String())
			sum, ok := archives[name]
			if !ok {
				return "", &missingArchiveError{name: name}
			}
			return fmt.Sprintf("uri: %s\n    sha256: %s", buf.String(), sum), nil
		},
		"indent": func(spaces int, s string) string {
			pad := strings.Repeat(" ", spaces)
			return strings.TrimSpace(pad + strings.ReplaceAll(s, "\n", "\n"+pad))
		},
	}
	t, err := template.New(".krew.yaml").Option("missingkey=error").Funcs(funcs).Parse(string(tmpl))
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := t.Execute(&out, values); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// krewValues are the template's values, as krew-release-bot names them.
type krewValues struct {
	TagName string
	Version string
}

var versionNumbersRE = regexp.MustCompile(`\d+(\.\d+)+`)

// versionOf is the release's version numbers without the v: v0.1.0 → 0.1.0.
func versionOf(tag string) string {
	if v := versionNumbersRE.FindString(tag); v != "" {
		return v
	}
	return tag
}
